"""NaN, infinities and signed zeros through every kernel family, with and without fast math.

Metal compiles with fast math (the compiler may assume that no NaN or infinity exists).
The kernels are meant to be right anyway: specials are decided on bit patterns, maxima
start from finite sentinels. These tests run the kernels on OpenCL as IEEE C, on OpenCL
built with ``-cl-fast-relaxed-math -cl-finite-math-only`` at the irregular group sizes
Metal may pick (96; 352 with the GPU-shaped kernels forced), and on the Metal stand-in
(fast math, per-function group sizes), and compare with numpy float64 following
/work/notes/SEMANTICS.md. References are written here from the definitions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import riftco.ops as ops
from helpers import assert_close as _assert_close
from riftco import ops as F

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

NAN, INF = math.nan, math.inf
SPECIALS = [NAN, -INF, INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 20.0, -20.0, 30.0, -30.0,
            100.0, -100.0, 1e-30, 3e38, -3e38, 2.0, -2.0]  # fmt: skip
_BACKENDS: dict[str, Any] = {}


def _make(kind: str) -> Any:
    if kind not in _BACKENDS:
        from riftco.backends.opencl.backend import OpenCLBackend

        if kind == "ieee":
            _BACKENDS[kind] = OpenCLBackend(0, group_size=256, fast_math=False)
        elif kind == "fast96":
            _BACKENDS[kind] = OpenCLBackend(0, group_size=96, fast_math=True)
        elif kind == "fast352gpu":  # GPU-shaped kernels (tiled flash, matmul_tiled) on PoCL
            b = OpenCLBackend(0, group_size=352, fast_math=True)
            b.runtime.capabilities = b.runtime.capabilities.shaped_for(cpu=False)
            _BACKENDS[kind] = b
        else:
            from riftco.backends.metal import standin
            from riftco.backends.metal.backend import MetalBackend

            _BACKENDS[kind] = MetalBackend(0, mc_module=standin)
    return _BACKENDS[kind]


@pytest.fixture(params=["ieee", "fast96", "fast352gpu", "metal"])
def be(request: pytest.FixtureRequest) -> Any:
    return _make(request.param)


def _dtypes(be: Any) -> list[np.dtype]:
    out = [np.dtype(np.float32)]
    if np.dtype(np.float64) in be.dtypes and be.name == "opencl" and not be.runtime.fast_math:
        out.append(np.dtype(np.float64))
    return out


def assert_close(got: Any, want: Any, **kw: Any) -> None:
    """helpers.assert_close (NaN and infinities must match exactly), quiet about the
    inf - inf it computes on the way."""
    with np.errstate(invalid="ignore"):
        _assert_close(got, want, **kw)


def _tol(dt: np.dtype) -> float:
    return 3e-6 if dt == np.float32 else 1e-13


def test_fast_math_flags_reach_the_compiler(be: Any) -> None:
    """The fast-math runs really are fast math: PoCL folds ``x != x`` to false under the
    flags (so this test can tell), while the IEEE run keeps it."""
    fast = be.runtime.fast_math if be.name == "opencl" else be.runtime.device.runtime.fast_math
    src = (
        "__kernel void probe(__global float* out, __global const float* x) {"
        " out[0] = x[0] != x[0] ? 1.0f : 0.0f; }"
    )
    cl = rt.cl
    runtime = be.runtime if be.name == "opencl" else be.runtime.device.runtime
    kernel = runtime.compile(src, "probe").kernel("probe")
    x = cl.Buffer(runtime.context, cl.mem_flags.COPY_HOST_PTR, hostbuf=np.array([NAN], np.float32))
    out = np.zeros(1, np.float32)
    ob = cl.Buffer(runtime.context, cl.mem_flags.WRITE_ONLY, 4)
    kernel(runtime.queue, (1,), None, ob, x)
    cl.enqueue_copy(runtime.queue, out, ob)
    assert out[0] == (0.0 if fast else 1.0), f"fast_math={fast}: x != x gave {out[0]}"


# -- elementwise -------------------------------------------------------------------------------
_UNARY = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda a: 1.0 / np.sqrt(a), "tanh": np.tanh, "abs": np.abs,
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(_UNARY))
def test_unary_specials(be: Any, op: str) -> None:
    for dt in _dtypes(be):
        x = np.array(SPECIALS, dt)
        with np.errstate(all="ignore"):
            want = _UNARY[op](x.astype(np.float64)).astype(dt)
        got = getattr(ops, op)(be.from_numpy(x)).numpy()
        assert_close(got, want, rtol=4 * _tol(dt), atol=0.0, msg=f"{op} {dt} {be}")
        if op in ("neg", "abs", "sqrt"):  # signs of zeros: -(+0), |-0|, sqrt(-0) = -0
            np.testing.assert_array_equal(np.signbit(got[3:5]), np.signbit(want[3:5]))


_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}  # fmt: skip


def _pairs(dt: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(np.array(SPECIALS, dt), np.array(SPECIALS, dt))
    return a.ravel(), b.ravel()


@pytest.mark.parametrize("op", sorted(_BINARY))
def test_binary_specials(be: Any, op: str) -> None:
    for dt in _dtypes(be):
        a, b = _pairs(dt)
        with np.errstate(all="ignore"):
            want = _BINARY[op](a, b)
        got = getattr(ops, op)(be.from_numpy(a), be.from_numpy(b)).numpy()
        assert_close(got, want, rtol=4 * _tol(dt), atol=0.0, msg=f"{op} {dt}")


@pytest.mark.parametrize("cmp", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_compare_is_ieee_with_nan(be: Any, cmp: str) -> None:
    fns = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
           "eq": np.equal, "ne": np.not_equal}  # fmt: skip
    for dt in _dtypes(be):
        a, b = _pairs(dt)
        got = ops.compare(be.from_numpy(a), be.from_numpy(b), cmp).numpy()
        np.testing.assert_array_equal(got, fns[cmp](a, b).astype(dt), err_msg=f"{cmp} {dt}")


def test_where_counts_nan_as_true_and_negative_zero_as_false(be: Any) -> None:
    for dt in _dtypes(be):
        cond = np.array([NAN, -0.0, 0.0, 1.0, -INF, 1e-30], dt)
        a, b = np.arange(6, dtype=dt), -np.arange(6, dtype=dt) - 1
        got = ops.where(*map(be.from_numpy, (cond, a, b))).numpy()
        np.testing.assert_array_equal(got, np.where(cond != 0, a, b))


@pytest.mark.parametrize("exponent", [2.0, 3.0, -1.0, 0.5, -1.5, 100.0, 101.0, INF, -INF, NAN])
def test_pow_scalar_specials(be: Any, exponent: float) -> None:
    for dt in _dtypes(be):
        x = np.array(SPECIALS, dt)
        with np.errstate(all="ignore"):
            want = np.power(x.astype(np.float64), exponent).astype(dt)
        got = ops.pow_scalar(be.from_numpy(x), exponent).numpy()
        assert_close(got, want, rtol=16 * _tol(dt), atol=0.0, msg=f"x ** {exponent} {dt}")


def test_cast_float_to_int_saturates_and_maps_nan_to_zero(be: Any) -> None:
    x = np.array([NAN, INF, -INF, 3e9, -3e9, 2.7, -2.7, -0.0, 2147483520.0, -2147483648.0])
    want = [0, 2**31 - 1, -(2**31), 2**31 - 1, -(2**31), 2, -2, 0, 2147483520, -(2**31)]
    got = ops.cast(be.from_numpy(x.astype(np.float32)), np.int32).numpy()
    np.testing.assert_array_equal(got, np.array(want, np.int32))
    if np.dtype(np.int64) in be.dtypes and np.dtype(np.float64) in _dtypes(be):
        x64 = np.array([NAN, INF, -INF, 1e19, -1e19, 3e9, -3e9, -2.5])
        want64 = [0, 2**63 - 1, -(2**63), 2**63 - 1, -(2**63), 3_000_000_000, -3_000_000_000, -2]
        got64 = ops.cast(be.from_numpy(x64), np.int64).numpy()
        np.testing.assert_array_equal(got64, np.array(want64, np.int64))


# -- reductions --------------------------------------------------------------------------------
@pytest.mark.parametrize("cols", [5, 301])  # one thread per row; a threadgroup per row
def test_max_and_argmax_with_specials(be: Any, cols: int) -> None:
    rng = np.random.default_rng(0)
    for dt in _dtypes(be):
        x = rng.normal(size=(6, cols)).astype(dt)
        x[0, 3] = NAN  # NaN wins max, argmax points at the first NaN
        x[0, cols - 1] = NAN
        x[1, :] = -INF  # an all -inf row: max -inf, argmax 0
        x[2, 2] = INF
        x[3, :] = -3e38
        x[3, cols // 2] = -1e38
        x[4, 1:] = x[4, 0]  # ties: first index
        got_max = ops.max(be.from_numpy(x), (1,)).numpy()
        assert_close(got_max, np.max(x, axis=1), rtol=0.0, atol=0.0, msg=f"max rows {dt}")
        got_cols = ops.max(be.from_numpy(np.ascontiguousarray(x.T)), (0,)).numpy()
        assert_close(got_cols, np.max(x, axis=1), rtol=0.0, atol=0.0, msg=f"max cols {dt}")
        got_arg = ops.argmax(be.from_numpy(x)).numpy()
        np.testing.assert_array_equal(got_arg, np.argmax(x, axis=1))
        assert got_arg[0] == 3


def test_sum_propagates_specials(be: Any) -> None:
    for dt in _dtypes(be):
        x = np.ones((4, 300), dt)
        x[0, 7], x[1, 8], x[2, 9], x[2, 10] = NAN, INF, INF, -INF
        got = ops.sum(be.from_numpy(x), (1,)).numpy()
        with np.errstate(invalid="ignore"):
            want = x.astype(np.float64).sum(1)
        assert_close(got, want, rtol=_tol(dt), atol=0.0, msg=f"sum {dt}")


# -- fused ------------------------------------------------------------------------------------
def _softmax_ref(x: np.ndarray) -> np.ndarray:
    """SEMANTICS.md: -inf entries give 0, a row with NaN or +inf or all -inf is NaN."""
    x = x.astype(np.float64)
    out = np.full(x.shape, np.nan)
    for idx in np.ndindex(x.shape[:-1]):
        row = x[idx]
        if np.isnan(row).any() or np.isposinf(row).any() or not np.isfinite(row).any():
            continue
        fin = np.isfinite(row)
        e = np.where(fin, np.exp(np.where(fin, row, 0) - row[fin].max()), 0.0)
        out[idx] = e / e.sum()
    return out


@pytest.mark.parametrize("cols", [7, 100, 2000])  # team widths 2, 32 and a whole group
def test_softmax_special_rows(be: Any, cols: int) -> None:
    rng = np.random.default_rng(1)
    for dt in _dtypes(be):
        x = rng.normal(0, 3, (6, cols)).astype(dt)
        x[0, ::3] = -INF  # masked entries: exactly 0
        x[1, :] = -INF  # all masked: NaN row
        x[2, cols // 2] = NAN  # NaN anywhere: NaN row
        x[3, 1] = INF  # +inf: NaN row (inf - inf)
        x[4, :] = -3e38  # the lowest finite values are ordinary entries
        x[4, 0] = 3e38
        got = F.softmax(be.from_numpy(x)).numpy()
        want = _softmax_ref(x)
        assert_close(got, want, rtol=20 * _tol(dt), atol=_tol(dt), msg=f"softmax {cols} {dt}")
        assert (got[0, ::3] == 0).all()


@pytest.mark.parametrize("v", [9, 2000])
def test_cross_entropy_specials(be: Any, v: int) -> None:
    rng = np.random.default_rng(2)
    for dt in _dtypes(be):
        n = 6
        logits = rng.normal(0, 2, (n, v)).astype(dt)
        targets = np.array([1, 2, 3, -1, 0, 4], np.int32)
        logits[0, 5] = -INF  # non-target -inf: finite loss
        logits[1, 2] = -INF  # target -inf: loss +inf
        logits[2, 6] = NAN  # NaN in the row: NaN loss and lse
        logits[3, 0] = NAN  # ignored row: loss 0 whatever the row holds
        logits[4, 7] = INF  # +inf in the row: NaN
        lt, tt = be.from_numpy(logits), be.from_numpy(targets)
        loss, lse = (t.numpy() for t in F.cross_entropy(lt, tt))
        l64 = logits.astype(np.float64)
        fin = np.isfinite(l64)
        m = np.where(fin, l64, -np.inf).max(1)
        ref_lse = m + np.log(np.where(fin, np.exp(np.where(fin, l64, 0) - m[:, None]), 0).sum(1))
        ref_lse[[2, 3, 4]] = np.nan
        picked = l64[np.arange(n), np.maximum(targets, 0)]
        with np.errstate(invalid="ignore"):
            ref_loss = np.where(targets < 0, 0.0, ref_lse - picked)
        assert_close(lse, ref_lse, rtol=20 * _tol(dt), atol=20 * _tol(dt), msg="lse")
        assert_close(loss, ref_loss, rtol=20 * _tol(dt), atol=20 * _tol(dt), msg="loss")
        assert loss[1] == INF and np.isfinite(loss[0]) and loss[3] == 0
        # backward from the forward's own lse: rows 0 and 1 finite except where IEEE says
        dloss = np.ones(n, dt)
        dl = F.cross_entropy_backward(be.from_numpy(dloss), lt, tt, be.from_numpy(lse)).numpy()
        with np.errstate(all="ignore"):
            p = np.exp(l64 - lse.astype(np.float64)[:, None])
            onehot = np.zeros((n, v))
            onehot[np.arange(n)[targets >= 0], targets[targets >= 0]] = 1
            ref = (p - onehot) * (dloss * (targets >= 0))[:, None]
        assert_close(dl, ref, rtol=20 * _tol(dt), atol=20 * _tol(dt), msg="dlogits")
        assert dl[0, 5] == 0


def test_gelu_specials(be: Any) -> None:
    x = np.array(SPECIALS, np.float32)
    for form in ("tanh", "none"):
        y = F.gelu(be.from_numpy(x), form).numpy()
        dx = F.gelu_backward(be.from_numpy(np.ones_like(x)), be.from_numpy(x), form).numpy()
        fin = np.isfinite(x)
        # finite inputs: the float64 definitions; specials: NaN, +inf -> +inf, -inf -> NaN
        assert np.isnan(y[~fin & ~np.isposinf(x)]).all() and (y[np.isposinf(x)] == INF).all()
        assert np.isnan(dx[~fin]).all()
        xf = x[fin].astype(np.float64)
        if form == "none":
            cdf = 0.5 * np.array([math.erfc(-v / math.sqrt(2)) for v in xf])
            ref_y = xf * cdf
            ref_g = cdf + xf * np.exp(-0.5 * np.minimum(xf * xf, 1e4)) / math.sqrt(2 * math.pi)
        else:
            u = math.sqrt(2 / math.pi) * (xf + 0.044715 * np.clip(xf, -1e6, 1e6) ** 3)
            th = np.tanh(u)
            ref_y = 0.5 * xf * (1 + th)
            ref_g = 0.5 * (1 + th) + np.where(
                np.abs(u) > 40, 0.0,
                0.5 * xf * (1 - th**2) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * xf**2),
            )  # fmt: skip
        assert_close(y[fin], ref_y, rtol=2e-5, atol=1e-6, msg=f"gelu {form}")
        assert_close(dx[fin], ref_g, rtol=2e-5, atol=1e-6, msg=f"gelu' {form}")


def test_linear_gelu_epilogue_specials(be: Any) -> None:
    """The epilogue kernel (bias + GELU on the product) decides specials as ``gelu`` does:
    h = 1 * w + 0 carries every special, and y must be ``gelu(h)``'s value (NaN for NaN)."""
    w = np.array([SPECIALS], np.float32)
    x, b = np.ones((2, 1), np.float32), np.zeros(w.shape[1], np.float32)
    for form in ("tanh", "none"):
        y, h = F.linear_gelu(be.from_numpy(x), be.from_numpy(w), be.from_numpy(b), form)
        ref = F.gelu(be.from_numpy(np.repeat(w, 2, 0)), form).numpy()
        np.testing.assert_array_equal(h.numpy(), np.repeat(w, 2, 0))
        assert_close(y.numpy(), ref, rtol=1e-6, atol=0.0, msg=f"linear_gelu {form}")


def test_layer_norm_nan_row_stays_in_its_row(be: Any) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 40)).astype(np.float32)
    x[2, 7] = NAN
    g, b = np.ones(40, np.float32), np.zeros(40, np.float32)
    y, mean, rstd = (t.numpy() for t in F.layer_norm(*map(be.from_numpy, (x, g, b))))
    assert np.isnan(y[2]).all() and np.isnan(mean[2])
    keep = [0, 1, 3, 4]
    x64 = x[keep].astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    assert_close(y[keep], ref, rtol=1e-4, atol=1e-5, msg="layer_norm")


def _attention_ref_rows(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> Any:
    """Causal attention in float64 with the row rules (a NaN score row: NaN where visible;
    masked probabilities exactly 0 in every row, as the attention contract says)."""
    t = q.shape[-2]
    s = scale * np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64))
    masked = np.triu(np.ones((t, t), bool), 1)
    s = np.where(masked, -np.inf, s)
    p = np.where(masked, 0.0, _softmax_ref(s))
    with np.errstate(invalid="ignore"):
        lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    return p @ v.astype(np.float64), p, lse


@pytest.mark.parametrize("t", [5, 37])
def test_attention_nan_query_row_stays_in_its_row(be: Any, t: int) -> None:
    rng = np.random.default_rng(4)
    q, k, v = (rng.normal(size=(1, 2, t, 8)).astype(np.float32) for _ in range(3))
    q[0, 1, 3, 2] = NAN  # one query row of one head
    k[0, 0, t - 1, 0] = NAN  # the last key of head 0: visible only to the last query row
    scale = 0.35
    ref_out, ref_p, ref_lse = _attention_ref_rows(q, k, v, scale)
    tq, tk, tv = map(be.from_numpy, (q, k, v))
    out, probs = F.attention(tq, tk, tv, scale, True)
    assert_close(probs.numpy(), ref_p, rtol=1e-5, atol=1e-6, msg="attention probs")
    assert_close(out.numpy(), ref_out, rtol=1e-5, atol=1e-5, msg="attention out")
    fout, lse = F.flash_attention(tq, tk, tv, scale, True)
    assert_close(fout.numpy(), ref_out, rtol=1e-5, atol=1e-5, msg="flash out")
    assert_close(lse.numpy(), ref_lse, rtol=1e-5, atol=1e-5, msg="flash lse")
    do = be.from_numpy(np.ones((1, 2, t, 8), np.float32))
    dq, dk, dv = (g.numpy() for g in F.flash_attention_backward(do, tq, tk, tv, fout, lse,
                                                                 scale, True))  # fmt: skip
    # The NaN query row's gradient is NaN; head 1's other query rows never meet a NaN. (A
    # NaN at a *masked* position may reach other rows as 0 * NaN, as in the dense reference,
    # or not, where a kernel skips whole masked tiles: that is not pinned down here.)
    assert np.isnan(dq[0, 1, 3]).all()
    assert np.isfinite(np.delete(dq[0, 1], 3, axis=0)).all()
