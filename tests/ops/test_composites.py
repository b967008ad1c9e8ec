"""Composite fallbacks (built from primitives only) against the native CPU fused ops.

The native ops are themselves checked against independent math in ``test_cpu_fused_ops.py``;
here the composites are compared with them on random inputs, in float64 and float32, and
run end to end on a backend that has no fused op and accepts only dense operands.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import riftco
from helpers import add_backend, assert_close, primitives_only_backend
from riftco import ops
from riftco.backend import FUSED_OPS
from riftco.ops import is_native
from riftco.tensor import Tensor

TOL = {np.float64: dict(rtol=1e-11, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-5)}
# float64: a float64-grade erf series; float32: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)
ERF_TOL = {np.float64: dict(rtol=1e-12, atol=1e-13), np.float32: dict(rtol=2e-5, atol=2e-5)}


def cases(rng: np.random.Generator, dtype, device: str = "cpu") -> dict[str, tuple]:
    """Arguments for every fused op, built once from host arrays."""

    def r(*shape, scale=1.0):
        return riftco.tensor((rng.normal(0, scale, shape)).astype(dtype), device=device)

    def ints(values, id_dtype=np.int32):
        return riftco.tensor(np.asarray(values, dtype=id_dtype), device=device)

    x, dy = r(3, 7, scale=2.0), r(3, 7)
    y = ops.softmax(r(3, 7))
    gamma, beta = r(7), r(7)
    ln = ops.layer_norm(x, gamma, beta, 1e-5)
    logits = r(4, 6, scale=2.0)
    targets = ints([5, -1, 0, 2], np.int64)
    lse = ops.cross_entropy(logits, targets)[1]
    q, k, v, dout = (r(2, 2, 5, 3) for _ in range(4))
    scale = 1.0 / math.sqrt(3.0)
    att = ops.attention(q, k, v, scale, True)
    fl = ops.flash_attention(q, k, v, scale, False)
    return {
        "gelu/tanh": ("gelu", (x, "tanh"), TOL),
        "gelu/none": ("gelu", (x, "none"), ERF_TOL),
        "gelu_backward/tanh": ("gelu_backward", (dy, x, "tanh"), TOL),
        "gelu_backward/none": ("gelu_backward", (dy, x, "none"), ERF_TOL),
        "softmax": ("softmax", (x,), TOL),
        "softmax_backward": ("softmax_backward", (dy, y), TOL),
        "layer_norm": ("layer_norm", (x, gamma, beta, 1e-5), TOL),
        "layer_norm_backward": ("layer_norm_backward", (dy, x, gamma, ln[1], ln[2]), TOL),
        "embedding": ("embedding", (r(5, 4), ints([[4, 0, 4], [1, 1, 3]])), TOL),
        "embedding_backward": (
            "embedding_backward",
            (r(2, 3, 4), ints([[4, 0, 4], [1, 1, 3]]), 6),
            TOL,
        ),  # noqa: E501
        "cross_entropy": ("cross_entropy", (logits, targets), TOL),
        "cross_entropy_backward": ("cross_entropy_backward", (r(4), logits, targets, lse), TOL),
        "attention/causal": ("attention", (q, k, v, scale, True), TOL),
        "attention/full": ("attention", (q, k, v, scale, False), TOL),
        "attention_backward": ("attention_backward", (dout, q, k, v, att[1], scale), TOL),
        "flash_attention/causal": ("flash_attention", (q, k, v, scale, True), TOL),
        "flash_attention/full": ("flash_attention", (q, k, v, scale, False), TOL),
        "flash_attention_backward": (
            "flash_attention_backward",
            (dout, q, k, v, *fl, scale, False),
            TOL,
        ),  # noqa: E501
    }


CASE_IDS = list(cases(np.random.default_rng(0), np.float64))
DTYPES = [np.float64, np.float32]


def as_tuple(out):
    return out if isinstance(out, (tuple, list)) else (out,)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", CASE_IDS)
def test_composite_matches_native(case, dtype, rng):
    op, args, tol = cases(rng, dtype)[case]
    native = as_tuple(getattr(ops, op)(*args))
    composite = as_tuple(ops.composite(op)(*args))
    assert len(native) == len(composite)
    for i, (c, n) in enumerate(zip(composite, native, strict=True)):
        assert c.dtype == n.dtype == np.dtype(dtype), f"{case}[{i}] dtype"
        assert_close(c, n, **tol[dtype], msg=f"{case} output {i}")


def test_composite_erf_gelu_against_math_erf():
    """float64 is float64-grade (issue 12: the float32-grade erf was 7e-8 off in float64)."""
    xs = np.concatenate([np.linspace(-9, 9, 145), [-40.0, 40.0, -1e4, 1e4]])
    got = ops.composite("gelu")(riftco.tensor(xs), "none").numpy()
    want = [0.5 * v * math.erfc(-v / math.sqrt(2)) for v in xs]  # erfc: no cancellation
    assert_close(got, want, rtol=1e-13, atol=1e-14)  # 1 + erf cancels: ~eps * |x|
    assert got[72] == 0.0  # gelu(0) = 0
    assert got[-4] == 0.0 and got[-3] == 40.0 and got[-1] == 1e4


def test_composite_erf_gelu_float32_within_an_ulp_of_one():
    xs = np.linspace(-6, 6, 97)
    got = ops.composite("gelu")(riftco.tensor(xs.astype(np.float32)), "none").numpy()
    want = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in xs.astype(np.float32)]
    assert_close(got, want, rtol=1.2e-7, atol=4.6e-7)  # 0.75e-7 |x| plus float32 rounding


def test_composite_attention_masks_exactly():
    q = riftco.tensor(np.ones((1, 1, 4, 2)))
    _, probs = ops.composite("attention")(q, q, q, 1.0, True)
    p = probs.numpy()[0, 0]
    assert (p[np.triu_indices(4, 1)] == 0).all()
    assert_close(p[3], [0.25] * 4, rtol=1e-15)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_composite_adam_matches_native(dtype, rng):
    p0, g, m0, v0 = (rng.normal(0, 1, (3, 4)).astype(dtype) for _ in range(4))
    v0 = np.abs(v0)
    args = (0.01, 0.9, 0.999, 1e-8, 0.01, 3)
    native = [riftco.tensor(a) for a in (p0, g, m0, v0)]
    comp = [riftco.tensor(a) for a in (p0, g, m0, v0)]
    ops.adam_update(*native, *args)
    ops.composite("adam_update")(*comp, *args)
    for n, c, name in zip(native, comp, ["param", "grad", "m", "v"], strict=True):
        assert_close(c, n, **TOL[dtype], msg=name)


def test_composites_accept_non_contiguous_ids():
    table = riftco.tensor(np.arange(12.0).reshape(4, 3))
    ids = riftco.tensor(np.array([[0, 3], [2, 1]], dtype=np.int32)).T  # a strided view
    assert not ids.is_contiguous
    assert_close(ops.composite("embedding")(table, ids), ops.embedding(table, ids))
    dy = riftco.tensor(np.arange(12.0).reshape(2, 2, 3)).permute(1, 0, 2)
    assert_close(
        ops.composite("embedding_backward")(dy, ids, 4), ops.embedding_backward(dy, ids, 4)
    )


# -- a backend with primitives only, which accepts only dense operands ----------------------
PrimsOnly = primitives_only_backend("prims")


def strided(a):
    """Same shape and values, but a transposed (non-dense) view."""
    if not isinstance(a, Tensor) or a.ndim < 2:
        return a
    return a.T.contiguous().T


def test_dense_only_spy_catches_views(registry):
    backend = add_backend(registry, PrimsOnly)
    x = riftco.tensor(np.ones((2, 3)), device="prims")
    with pytest.raises(AssertionError, match="non-dense"):
        backend.exp(strided(x))


def test_primitives_only_backend_runs_every_fused_op(registry, rng):
    backend = add_backend(registry, PrimsOnly)
    assert PrimsOnly.capabilities().fused == frozenset()
    assert not any(is_native(backend, op) for op in FUSED_OPS)
    caps = registry.entry("prims").as_dict()["capabilities"]
    assert set(caps["fused"].values()) == {"composite"}
    seed = int(rng.integers(1 << 30))
    on_prims = cases(np.random.default_rng(seed), np.float64, device="prims")
    on_cpu = cases(np.random.default_rng(seed), np.float64, device="cpu")
    for case, (op, args, tol) in on_prims.items():
        # strided views on the dense-only backend: core must materialise them first
        args = tuple(strided(a) for a in args)
        assert any(isinstance(a, Tensor) and not a.is_dense for a in args), case
        got = as_tuple(getattr(ops, op)(*args))
        want = as_tuple(getattr(ops, op)(*on_cpu[case][1]))
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g.backend is backend, case
            assert_close(g.numpy(), w, **tol[np.float64], msg=f"{case} output {i}")


def test_primitives_only_backend_gets_dense_copies_of_views(registry):
    add_backend(registry, PrimsOnly)
    x = riftco.tensor(np.arange(6.0).reshape(2, 3), device="prims")
    assert ops.exp(x.T).tolist() == np.exp(np.arange(6.0).reshape(2, 3).T).tolist()
    ids = riftco.tensor(np.array([[0, 2], [1, 0]], dtype=np.int32), device="prims").T
    table = riftco.tensor(np.arange(9.0).reshape(3, 3), device="prims")
    assert (
        ops.embedding(table, ids).tolist()
        == np.arange(9.0).reshape(3, 3)[[[0, 1], [2, 0]]].tolist()
    )  # noqa: E501


def test_composite_flash_is_renormalised_at_large_scores():
    """Issue 12: with scores ~1e4 in float32, ``exp(s - lse) @ v`` carries lse's rounding
    into every output (1.3e-4 of the largest here); ``(E v) / rowsum(E)`` cancels it (1.5e-7)."""
    rng = np.random.default_rng(5)
    t, d = 64, 64
    q, k, v = (rng.standard_normal((1, 2, t, d)) for _ in range(3))
    f32 = [riftco.tensor(a.astype(np.float32)) for a in (60.0 * q, 60.0 * k, v)]
    scale = 1.0 / math.sqrt(d)
    q32, k32, v32 = (a.numpy().astype(np.float64) for a in f32)  # what the op sees
    s = scale * q32 @ np.swapaxes(k32, -1, -2)
    s = np.where(np.triu(np.ones((t, t), bool), 1), -np.inf, s)
    assert np.abs(s[np.isfinite(s)]).max() > 1e4
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v32
    out, _ = ops.composite("flash_attention")(*f32, scale, True)
    err = np.abs(out.numpy() - want).max() / np.abs(want).max()
    assert err < 1e-5, err
