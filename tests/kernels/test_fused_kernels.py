"""Fused kernels (shaders/*.cl + core/kernel_host/fused_*.py) on PoCL, against float64 numpy.

The kernels are driven through the real host mixin ``FusedPlans`` on top of a tiny
pyopencl stand-in for the kernel host layer (``_ClHost``: ``empty``/``fill``/``launch`` and
a runtime that declares its capabilities), with an explicit work-group size so every
kernel runs at the irregular sizes Metal may pick (32, 96, 256, 352). References are
written here, independently of the CPU backend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
import pytest
from fused_reference import attention_ref, gelu_ref, softmax_ref
from helpers import assert_close
from riftco.errors import ShapeError
from riftco.kernel_host.fused import FusedPlans
from riftco.kernel_host.runtime import RuntimeCapabilities
from riftco.kernel_host.sources import program_source

cl = pytest.importorskip("pyopencl", reason="pyopencl is not installed (test extra)")

GROUPS = (32, 96, 256, 352)
DTYPES = (np.float32, np.float64)
TOL = {np.dtype(np.float32): (3e-5, 3e-6), np.dtype(np.float64): (1e-11, 1e-12)}


@cache
def _context() -> tuple[Any, Any] | None:
    """The first PoCL device that can actually build a kernel (some builds cannot on new CPUs)."""
    for platform in cl.get_platforms():
        devices = platform.get_devices()
        if not devices or "portable computing" not in platform.name.lower():
            continue
        ctx = cl.Context(devices[:1])
        try:
            cl.Program(ctx, "__kernel void probe(__global float* x) { x[0] = 1.0f; }").build()
        except cl.Error:
            continue
        return ctx, cl.CommandQueue(ctx)
    return None


if _context() is None:
    pytest.skip("no PoCL OpenCL platform that builds kernels", allow_module_level=True)


@cache
def _program(family: str, dtype: str, index: str, defines: tuple[tuple[str, str], ...] = ()) -> Any:
    """The family's source exactly as the host layer assembles it (cached per test run)."""
    ctx, _ = _context()
    c_types = {"float": np.float32, "double": np.float64, "int": np.int32, "long": np.int64}
    src = program_source(family, np.dtype(c_types[dtype]), np.dtype(c_types[index]),
                         dict(defines) or None)  # fmt: skip
    return cl.Program(ctx, src).build()


class _Buf:
    """The few Tensor attributes ``FusedPlans`` reads, around a cl.Buffer."""

    def __init__(self, shape: Sequence[int], dtype: Any) -> None:
        ctx, _ = _context()
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.size = math.prod(self.shape)
        self.ndim = len(self.shape)
        self.buffer = cl.Buffer(
            ctx, cl.mem_flags.READ_WRITE, max(self.size, 1) * self.dtype.itemsize
        )


class _Runtime:
    """The one part of a runtime the fused plans read: the tiled (GPU-shaped) flash kernels,
    with the group size fixed by ``_ClHost``."""

    def __init__(self, group: int) -> None:
        self.capabilities = RuntimeCapabilities(
            is_cpu=False, serial_rows=False, group_size_hint=group, matmul_wide_min_tiles=math.inf
        )


class _ClHost(FusedPlans):
    """Stand-in for the kernel host layer with a fixed work-group size."""

    def __init__(self, group: int) -> None:
        self.group = group
        self.runtime = _Runtime(group)
        self.launches: list[str] = []
        # the device status buffer (shaders/status.h): word 0 = flags, then min/max per slot
        self.status = self.up(np.array([0] + [2**31 - 1, -(2**31)] * 16, np.int32))

    def empty(self, shape: Sequence[int], dtype: Any) -> _Buf:
        return _Buf(shape, dtype)

    def fill(self, x: _Buf, value: float) -> None:
        _, queue = _context()
        cl.enqueue_copy(queue, x.buffer, np.full(max(x.size, 1), value, x.dtype))

    def up(self, array: np.ndarray) -> _Buf:
        a = np.ascontiguousarray(array)
        buf = _Buf(a.shape, a.dtype)
        if a.size:
            cl.enqueue_copy(_context()[1], buf.buffer, a)
        return buf

    def down(self, x: _Buf) -> np.ndarray:
        out = np.empty(x.shape, x.dtype)
        if x.size:
            cl.enqueue_copy(_context()[1], out, x.buffer)
        return out

    def matmul(self, a: _Buf, b: _Buf, transpose_a: bool, transpose_b: bool) -> _Buf:
        """The host layer's matmul, stood in for by numpy in the operands' dtype.

        The materialised attention composes matmuls with fused row kernels; only the row
        kernels are under test here (the in-order queue keeps the blocking copies safe)."""
        x, y = self.down(a), self.down(b)
        x = np.swapaxes(x, -1, -2) if transpose_a else x
        y = np.swapaxes(y, -1, -2) if transpose_b else y
        return self.up(np.matmul(x, y))

    def launch(
        self,
        family: str,
        kernel: str,
        dtype: Any,
        threads: int,
        *args: _Buf,
        ints: Sequence[int] = (),
        floats: Sequence[float] = (),
        index_dtype: Any = None,
        defines: Mapping[str, str] | None = None,
        status: tuple[str, int] | None = None,
    ) -> None:
        dtype = np.dtype(dtype)
        index = "long" if np.dtype(index_dtype or np.int32) == np.int64 else "int"
        prg = _program(family, "double" if dtype == np.float64 else "float", index,
                       tuple(sorted((defines or {}).items())))  # fmt: skip
        bufs = [a.buffer for a in args]
        if status is not None:  # the status buffer, and slot 0 as the last int
            bufs.append(self.status.buffer)
            ints = (*ints, 0)
        if ints:
            bufs.append(self.up(np.asarray(ints, np.int32)).buffer)
        if floats:
            bufs.append(self.up(np.asarray(floats, dtype)).buffer)
        assert threads >= 1
        size = -(-threads // self.group) * self.group
        knl = cl.Kernel(prg, kernel)
        knl.set_args(*bufs)
        cl.enqueue_nd_range_kernel(_context()[1], knl, (size,), (self.group,))
        self.launches.append(kernel)


@pytest.fixture(scope="module", params=GROUPS, ids=lambda g: f"group{g}")
def host(request: pytest.FixtureRequest) -> _ClHost:
    return _ClHost(request.param)


def _close(got: np.ndarray, ref: np.ndarray, dtype: Any, what: str, scale: float = 1.0) -> float:
    rtol, atol = TOL[np.dtype(dtype)]
    assert_close(got, ref, rtol=rtol * scale, atol=atol * scale, msg=what)
    finite = np.isfinite(ref)
    return float(np.max(np.abs(got[finite] - ref[finite]), initial=0.0))


def _rng(seed: int = 7) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- GELU --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("form", ["tanh", "none"])
def test_gelu_forward_backward(host: _ClHost, dtype: Any, form: str) -> None:
    rng = _rng()
    special = np.array([0.0, -0.0, 1e-4, -1e-4, 80.0, -80.0, 3.0, -3.0, 3.6, -3.6, 7.0, -7.0])
    for n in (1, 33, 4097):
        x = np.concatenate([special, rng.normal(0, 3, n)])[:n].astype(dtype)
        dy = rng.normal(size=n).astype(dtype)
        y = host.down(host.gelu(host.up(x), form))
        dx = host.down(host.gelu_backward(host.up(dy), host.up(x), form))
        ref_y, ref_g = gelu_ref(x, form)
        _close(y, ref_y, dtype, f"gelu {form} n={n}")
        _close(dx, dy.astype(np.float64) * ref_g, dtype, f"gelu_backward {form} n={n}")


def test_gelu_exact_tail_is_relatively_accurate(host: _ClHost) -> None:
    """The exact form's CDF keeps relative accuracy deep in the left tail (no 1 - erf)."""
    x = np.linspace(-12.0, 12.0, 481)
    y = host.down(host.gelu(host.up(x), "none"))
    ref = x * 0.5 * np.array([math.erfc(-v / math.sqrt(2.0)) for v in x])
    assert_close(y, ref, rtol=2e-13, atol=0.0, msg="gelu none f64 tail")


# -- softmax -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_softmax_forward_backward(host: _ClHost, dtype: Any) -> None:
    rng = _rng(1)
    for shape in ((1, 1), (3, 33), (2, 4097), (2, 3, 7)):
        x = rng.normal(0, 4, shape)
        x.reshape(-1)[::5] = -np.inf  # masked entries
        x[..., 0] = 80.0 if shape[-1] > 2 else x[..., 0]
        if shape[-1] > 2:
            x[..., 1] = -80.0
        x.reshape(-1, shape[-1])[-1] = -np.inf  # a fully masked row: NaN, like the math
        x = x.astype(dtype)
        y = host.down(host.softmax(host.up(x)))
        ref = softmax_ref(x)
        _close(y, ref, dtype, f"softmax {shape}")
        assert np.isnan(y.reshape(-1, shape[-1])[-1]).all()
        masked = np.isneginf(x) & ~np.isnan(ref)
        assert (y[masked] == 0).all(), "masked entries must be exactly 0"
        yv = np.nan_to_num(ref).astype(dtype)
        dy = rng.normal(size=shape).astype(dtype)
        dx = host.down(host.softmax_backward(host.up(dy), host.up(yv)))
        y64 = yv.astype(np.float64)
        ref_dx = y64 * (dy - np.einsum("...j,...j->...", dy.astype(np.float64), y64)[..., None])
        _close(dx, ref_dx, dtype, f"softmax_backward {shape}")


# -- LayerNorm ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_layer_norm_forward_backward(host: _ClHost, dtype: Any) -> None:
    rng = _rng(2)
    eps = 1e-5
    for shape in ((1, 1), (7, 33), (130, 65), (2, 4097)):
        c = shape[-1]
        x = (rng.normal(size=shape) * 3 + 50).astype(dtype)  # offset: two-pass variance
        gamma = rng.normal(size=c).astype(dtype)
        beta = rng.normal(size=c).astype(dtype)
        y, mean, rstd = (
            host.down(t) for t in host.layer_norm(*map(host.up, (x, gamma, beta)), eps)
        )
        x64 = x.astype(np.float64)
        mu = x64.mean(-1)
        var = ((x64 - mu[..., None]) ** 2).mean(-1)
        r = 1 / np.sqrt(var + eps)
        xhat = (x64 - mu[..., None]) * r[..., None]
        _close(mean, mu, dtype, f"layer_norm mean {shape}", scale=50)
        _close(rstd, r, dtype, f"layer_norm rstd {shape}", scale=10)
        _close(y, xhat * gamma + beta, dtype, f"layer_norm y {shape}", scale=20)
        dy = rng.normal(size=shape).astype(dtype)
        ins = [host.up(a) for a in (dy, x, gamma, mu.astype(dtype), r.astype(dtype))]
        dx, dgamma, dbeta = (host.down(t) for t in host.layer_norm_backward(*ins))
        # reference from mean/rstd as given (float64 of the same values the kernel saw)
        mu_in, r_in = mu.astype(dtype).astype(np.float64), r.astype(dtype).astype(np.float64)
        xh = (x64 - mu_in[..., None]) * r_in[..., None]
        g = dy.astype(np.float64) * gamma
        ref_dx = r_in[..., None] * (
            g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True)
        )
        _close(dx, ref_dx, dtype, f"layer_norm_backward dx {shape}", scale=20)
        _close(dgamma, (dy * xh).sum(0), dtype, f"dgamma {shape}", scale=20)
        _close(dbeta, dy.astype(np.float64).sum(0), dtype, f"dbeta {shape}", scale=10)


# -- embedding ---------------------------------------------------------------------------------
@pytest.mark.parametrize("index", [np.int32, np.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_embedding_gather_and_deterministic_scatter(host: _ClHost, dtype: Any, index: Any) -> None:
    rng = _rng(3)
    v = 11
    for c in (1, 33):
        table = rng.normal(size=(v, c)).astype(dtype)
        ids = np.array([[0, 10, 3, 3, 3, 0, 10], [5, 5, 10, 1, 0, 3, 3]], dtype=index)
        out = host.down(host.embedding(host.up(table), host.up(ids)))
        np.testing.assert_array_equal(out, table[ids])
        dy = rng.normal(size=ids.shape + (c,)).astype(dtype)
        expected = np.zeros((v, c), dtype)
        np.add.at(expected, ids.reshape(-1), dy.reshape(-1, c))  # sequential, in id order
        runs = [host.down(host.embedding_backward(host.up(dy), host.up(ids), v)) for _ in range(2)]
        # same summation order as the sequential scatter-add: identical bits, every run
        np.testing.assert_array_equal(runs[0].view(np.uint8), expected.view(np.uint8))
        np.testing.assert_array_equal(runs[1].view(np.uint8), runs[0].view(np.uint8))
        assert (runs[0][[2, 4, 6, 7, 8, 9]] == 0).all()  # never-used rows are zero


# -- cross-entropy -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_cross_entropy_forward_backward(host: _ClHost, dtype: Any) -> None:
    rng = _rng(4)
    for v in (1, 33, 4097):
        n = 7
        logits = rng.normal(0, 3, (n, v))
        logits[0, 0] = 80.0
        logits[1, -1] = -80.0
        logits = logits.astype(dtype)
        targets = np.array([0, v - 1, -1, v // 2, -1, 0, v - 1], dtype=np.int64)
        loss, lse = (host.down(t) for t in host.cross_entropy(host.up(logits), host.up(targets)))
        l64 = logits.astype(np.float64)
        m = l64.max(-1)
        ref_lse = m + np.log(np.exp(l64 - m[:, None]).sum(-1))
        picked = l64[np.arange(n), np.maximum(targets, 0)]
        ref_loss = np.where(targets < 0, 0.0, ref_lse - picked)
        _close(lse, ref_lse, dtype, f"cross_entropy lse V={v}", scale=10)
        _close(loss, ref_loss, dtype, f"cross_entropy loss V={v}", scale=10)
        assert (loss[targets < 0] == 0).all()
        dloss = rng.normal(size=n).astype(dtype)
        lse_in = ref_lse.astype(dtype)
        dl = host.down(host.cross_entropy_backward(*map(host.up, (dloss, logits, targets, lse_in))))
        ref = np.exp(l64 - lse_in.astype(np.float64)[:, None])
        ref[np.arange(n), np.maximum(targets, 0)] -= targets >= 0
        ref *= (dloss * (targets >= 0))[:, None]
        _close(dl, ref, dtype, f"cross_entropy_backward V={v}", scale=10)
        assert (dl[targets < 0] == 0).all()


# -- attention (materialised and flash) --------------------------------------------------------
ATTN_CASES = [(1, 1, 1, 8), (1, 2, 7, 16), (2, 1, 65, 33), (1, 1, 130, 64)]


def _qkv(shape: tuple[int, ...], dtype: Any, seed: int) -> list[np.ndarray]:
    rng = _rng(seed)
    return [rng.normal(size=shape).astype(dtype) for _ in range(4)]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_attention_materialised(host: _ClHost, dtype: Any, causal: bool) -> None:
    for shape in ATTN_CASES:
        q, k, v, do = _qkv(shape, dtype, 5)
        scale = 1 / math.sqrt(shape[-1])
        ref = attention_ref(q, k, v, do, scale, causal)
        out_t, probs_t = host.attention(host.up(q), host.up(k), host.up(v), scale, causal)
        out, probs = host.down(out_t), host.down(probs_t)
        _close(out, ref["out"], dtype, f"attention out {shape}", scale=3)
        _close(probs, ref["probs"], dtype, f"attention probs {shape}", scale=3)
        if causal:
            t = shape[-2]
            assert (probs[..., np.triu(np.ones((t, t), bool), 1)] == 0).all()
        grads = host.attention_backward(*map(host.up, (do, q, k, v)), probs_t, scale)
        for name, g in zip(("dq", "dk", "dv"), grads, strict=True):
            _close(host.down(g), ref[name], dtype, f"attention_backward {name} {shape}", scale=10)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_flash_attention(host: _ClHost, dtype: Any, causal: bool) -> None:
    for shape in [*ATTN_CASES, (1, 1, 17, 128)]:
        q, k, v, do = _qkv(shape, dtype, 6)
        scale = 1 / math.sqrt(shape[-1])
        ref = attention_ref(q, k, v, do, scale, causal)
        before = len(host.launches)
        out_t, lse_t = host.flash_attention(host.up(q), host.up(k), host.up(v), scale, causal)
        _close(host.down(out_t), ref["out"], dtype, f"flash out {shape}", scale=3)
        _close(host.down(lse_t), ref["lse"], dtype, f"flash lse {shape}", scale=3)
        ins = [host.up(a) for a in (do, q, k, v)]
        grads = host.flash_attention_backward(*ins, out_t, lse_t, scale, causal)
        for name, g in zip(("dq", "dk", "dv"), grads, strict=True):
            _close(host.down(g), ref[name], dtype, f"flash backward {name} {shape}", scale=10)
        assert "attention_softmax" not in host.launches[before:]


def test_flash_attention_never_allocates_t_by_t(host: _ClHost) -> None:
    """Every buffer the flash ops ask for is O(T·D) or O(T), never [T, T]."""
    t, d = 65, 8
    sizes: list[tuple[int, ...]] = []
    real_empty = host.empty

    def spy(shape: Sequence[int], dtype: Any) -> _Buf:
        sizes.append(tuple(shape))
        return real_empty(shape, dtype)

    host.empty = spy  # type: ignore[method-assign]
    try:
        q, k, v, do = (host.up(a) for a in _qkv((1, 2, t, d), np.float32, 8))
        out, lse = host.flash_attention(q, k, v, 0.3, True)
        host.flash_attention_backward(do, q, k, v, out, lse, 0.3, True)
    finally:
        del host.empty
    assert sizes and max(math.prod(s) for s in sizes) <= 2 * t * d


def test_flash_attention_rejects_large_head_dim(host: _ClHost) -> None:
    q = host.up(np.zeros((1, 1, 3, 129), np.float32))
    before = len(host.launches)
    with pytest.raises(ShapeError, match=r"^\[flash_attention\].*D=129.*128"):
        host.flash_attention(q, q, q, 1.0, True)
    with pytest.raises(ShapeError, match=r"^\[flash_attention_backward\].*129"):
        host.flash_attention_backward(q, q, q, q, q, host.up(np.zeros((1, 1, 3))), 1.0, True)
    assert len(host.launches) == before
