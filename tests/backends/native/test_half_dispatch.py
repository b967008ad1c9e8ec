"""float16/bfloat16 on the native device through the public API: the dtypes are declared,
the ops in ``low_precision_ops`` run in 2-byte storage (no cast around them), the others
are widened by core through the backend's own cast, and the F16C and portable paths give
the same bits for every listed op.
"""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import native_backend_module
from riftco import ops as F

native_mod = native_backend_module()
ml_dtypes = pytest.importorskip("ml_dtypes")

F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
HALVES = pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])


def test_native_declares_both_half_dtypes() -> None:
    dev = riftco.device("native")
    assert {F16, BF16} <= set(dev.backend.dtypes)
    assert {"float16", "bfloat16"} <= set(native_mod.NativeBackend.devices()[0].dtypes)
    assert F16 in native_mod.NativeBackend.dtypes and BF16 in native_mod.NativeBackend.dtypes


class CountingCasts:
    """Counts the backend's ``cast`` calls (core's widening goes through it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, backend) -> None:
        self.calls = 0
        inner = backend.cast

        def cast(x, dtype):
            self.calls += 1
            return inner(x, dtype)

        monkeypatch.setattr(backend, "cast", cast)


def _stats(x) -> tuple:
    """LayerNorm's float32 mean and rstd of the rows of ``x`` (computed in float64)."""
    v = x.numpy().astype(np.float64)
    mean = v.mean(-1)
    rstd = 1 / np.sqrt(v.var(-1) + 1e-5)
    dev = x.device
    return (riftco.tensor(mean.astype(np.float32), device=dev),
            riftco.tensor(rstd.astype(np.float32), device=dev))  # fmt: skip


def _cases(dtype) -> dict[str, tuple]:
    rng = np.random.default_rng(2)
    dev = riftco.device("native")

    def t(*shape):
        return riftco.tensor((rng.standard_normal(shape) * 2).astype(dtype), device=dev)

    x, y = t(64, 300), t(64, 300)
    targets = riftco.tensor(np.where(np.arange(64) % 7 == 3, -1, np.arange(64) * 4), device=dev)
    return {
        "add": (F.add, (x, y)), "sub": (F.sub, (x, y)), "mul": (F.mul, (x, y)),
        "div": (F.div, (x, y)), "add_scalar": (lambda a: F.add_scalar(a, 0.1), (x,)),
        "mul_scalar": (lambda a: F.mul_scalar(a, 1 / 3), (x,)), "softmax": (F.softmax, (x,)),
        "softmax_backward": (F.softmax_backward, (y, F.softmax(x))),
        "layer_norm": (lambda a, g, b: F.layer_norm(a, g, b, 1e-5), (x, t(300), t(300))),
        "matmul": (F.matmul, (x, t(300, 40))), "linear": (F.linear, (x, t(300, 40), t(40))),
        "gelu": (lambda a: F.gelu(a, "tanh"), (x,)),
        "gelu_backward": (lambda d, a: F.gelu_backward(d, a, "none"), (y, x)),
        "add_layer_norm": (lambda a, r, g, b: F.add_layer_norm(a, r, g, b, 1e-5),
                           (x, y, t(300), t(300))),
        "linear_gelu": (lambda a, w, b: F.linear_gelu(a, w, b, "tanh"), (x, t(300, 40), t(40))),
        "concatenate_last_axis": (lambda a, b: F.concatenate_last_axis([a, b]), (x, y)),
        "split_last_axis": (lambda a: tuple(F.split_last_axis(a, [100, 200])), (x,)),
        "where": (F.where, (F.compare(x, y, "lt"), x, y)), "compare": (F.compare, (x, y, "ge")),
        "neg": (F.neg, (x,)), "abs": (F.abs, (x,)), "maximum": (F.maximum, (x, y)),
        "minimum": (F.minimum, (x, y)), "max": (lambda a: F.max(a, (1,)), (x,)),
        "argmax": (F.argmax, (x,)),
        "layer_norm_backward": (F.layer_norm_backward, (y, x, t(300), *_stats(x))),
        "add_layer_norm_backward": (F.add_layer_norm_backward,
                                    (y, x, F.add(x, y), t(300), *_stats(F.add(x, y)))),
        "cross_entropy": (F.cross_entropy, (x, targets)),
        "cross_entropy_backward": (F.cross_entropy_backward,
                                   (F.cross_entropy(x, targets)[0], x, targets,
                                    F.cross_entropy(x, targets)[1])),
        "linear_backward": (F.linear_backward, (t(64, 40), x, t(300, 40))),
        "linear_gelu_backward": (lambda d, a, w, h: F.linear_gelu_backward(d, a, w, h, "none"),
                                 (t(64, 40), x, t(300, 40), t(64, 40))),
        "embedding": (F.embedding, (t(50, 300),
                                    riftco.tensor(np.array([[1, 4], [49, 0]]), device=dev))),
    }  # fmt: skip


@HALVES
def test_listed_ops_run_without_a_cast_and_unlisted_ones_are_widened(monkeypatch, dtype) -> None:
    dev = riftco.device("native")
    cases = _cases(dtype)
    assert set(cases) == set(native_mod.NativeBackend.low_precision_ops)
    casts = CountingCasts(monkeypatch, dev.backend)
    for name, (fn, args) in cases.items():
        before = casts.calls
        outs = fn(*args)
        first = outs[0] if isinstance(outs, tuple) else outs
        assert first.dtype == dtype or name in ("argmax", "cross_entropy"), name
        assert casts.calls == before, f"{name} was widened ({casts.calls - before} casts)"
    x = cases["add"][1][0]
    before = casts.calls
    assert F.exp(x).dtype == dtype
    assert casts.calls == before + 2, "exp is not listed: widened (cast in, cast out)"


@HALVES
def test_f16c_and_portable_paths_give_the_same_bits(monkeypatch, dtype) -> None:
    dev = riftco.device("native")
    if not dev.backend._f16c:
        pytest.skip("this CPU has no F16C: only the portable path exists here")
    auto = {k: fn(*args) for k, (fn, args) in _cases(dtype).items()}
    monkeypatch.setattr(dev.backend, "_f16c", False)
    portable = {k: fn(*args) for k, (fn, args) in _cases(dtype).items()}
    for name in auto:
        a, p = auto[name], portable[name]
        for ta, tp in zip(a if isinstance(a, tuple) else (a,), p if isinstance(p, tuple) else (p,),
                          strict=True):  # fmt: skip
            assert np.array_equal(
                np.ascontiguousarray(ta.numpy()).view(np.uint8),
                np.ascontiguousarray(tp.numpy()).view(np.uint8),
            ), name


def test_public_cast_from_float64_rounds_once() -> None:
    dev = riftco.device("native")
    x = riftco.tensor(np.array([65519.99, 1 + 2**-11 + 2**-40]), device=dev)
    assert list(F.cast(x, "float16").numpy().astype(np.float64)) == [65504.0, 1 + 2**-10]
    y = riftco.tensor(np.array([1 + 2**-8 + 2**-30]), device=dev)
    assert F.cast(y, "bfloat16").numpy().astype(np.float64)[0] == 1 + 2**-7


def _bits(result) -> list[np.ndarray]:
    outs = result if isinstance(result, tuple) else (result,)
    return [np.ascontiguousarray(t.numpy()).view(np.uint8) for t in outs]


@HALVES
def test_listed_ops_give_the_widened_paths_bits(monkeypatch, dtype) -> None:
    """Each 2-byte kernel runs the float32 kernel's own worker on the widened row and rounds
    once, so it must give exactly what core's widened path gives (cast in, float32 op,
    cast out), statistics included. A kernel that normalised a rounded residual sum, or
    rounded a product before its bias, would differ here."""
    be = riftco.device("native").backend
    cases = _cases(dtype)
    native = {k: _bits(fn(*args)) for k, (fn, args) in cases.items()}
    monkeypatch.setattr(be, "low_precision_ops", frozenset())
    for name, (fn, args) in cases.items():
        widened = _bits(fn(*args))
        for i, (n, w) in enumerate(zip(native[name], widened, strict=True)):
            assert np.array_equal(n, w), f"{name} output {i}"


@HALVES
@pytest.mark.parametrize("gelu", ["", "tanh"])
@pytest.mark.parametrize(
    "m,k,n",
    [(600, 100, 90), (300, 600, 40)],
    ids=["one-chunk", "three-chunks"],  # X's columns in chunks of max(n, 256)
)
def test_chunked_linear_backward_matches_float64_and_the_widened_path(
    monkeypatch, dtype, gelu, m, k, n
) -> None:
    """The half backward holds X in float32 a chunk of max(N, 256) columns at a time and
    writes dX's columns over it once dW's rows have read it, each product split over the
    threads when it is large enough: one shape in one chunk, one in 256 + 256 + 88
    columns, both above the parallel threshold. Each gradient must be the float64 value
    rounded once, up to float32's accumulation error, and the widened path's value to one
    half ulp plus that error (BLAS may block a chunk's inner sum unlike the whole's, so
    sums that cancel can differ in float32's last bits; a chunk written to the wrong place,
    or widened from the wrong columns, is off by whole values)."""
    rng = np.random.default_rng(5)
    dev = riftco.device("native")

    def t(*shape):
        return riftco.tensor(rng.standard_normal(shape).astype(dtype), device=dev)

    dy, x, w, h = t(m, n), t(m, k), t(k, n), t(m, n)
    if gelu:
        run = lambda: F.linear_gelu_backward(dy, x, w, h, gelu)  # noqa: E731
    else:
        run = lambda: F.linear_backward(dy, x, w)  # noqa: E731
    tiled = [o.numpy().astype(np.float64) for o in run()]
    monkeypatch.setattr(dev.backend, "low_precision_ops", frozenset())
    widened = [o.numpy().astype(np.float64) for o in run()]

    d, xv, wv = (a.numpy().astype(np.float64) for a in (dy, x, w))
    if gelu:
        hv = h.numpy().astype(np.float64)
        inner = np.sqrt(2 / np.pi) * (hv + 0.044715 * hv**3)
        th = np.tanh(inner)
        dgelu = 0.5 * (1 + th) + 0.5 * hv * (1 - th**2) * np.sqrt(2 / np.pi) * (
            1 + 3 * 0.044715 * hv**2
        )
        d = d * dgelu
    refs = [d @ wv.T, xv.T @ d, d.sum(0)]
    scales = [np.abs(d) @ np.abs(wv).T, np.abs(xv).T @ np.abs(d), np.abs(d).sum(0)]
    u = 2.0**-11 if dtype == F16 else 2.0**-8
    for name, got, wide, ref, scale in zip(("dx", "dw", "db"), tiled, widened, refs, scales,
                                           strict=True):  # fmt: skip
        assert got.shape == ref.shape, name
        bound = u * np.abs(ref) + 1e-4 * scale + 2.0**-24
        worst = np.max(np.abs(got - ref) - bound)
        assert worst <= 0, f"{name}: off the float64 value by {worst:.3g} beyond the bound"
        ulp = u * 2 * np.maximum(np.abs(wide), 2.0**-14)
        assert np.all(np.abs(got - wide) <= ulp + 1e-4 * scale), f"{name}: off the widened path"
