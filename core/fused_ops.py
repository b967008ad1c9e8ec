"""Fused raw ops: validate, then run the backend's native kernel or core's composite.

Whether an op runs natively is decided once per backend class from its capabilities
(``Capabilities.fused``), so a backend that lacks, say, ``flash_attention`` still works:
it gets the composite in ``composites.py``, built only from primitives.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import composites
from . import tensor_ops as _ops
from .backend import GELU_APPROXIMATIONS
from .errors import DomainError, DTypeError, ShapeError
from .tensor import Tensor
from .validation import (
    _float,
    _index,
    _rank,
    _require_tensor,
    _same_dtype,
    _supported,
    same_backend,
)

__all__ = [
    "gelu", "gelu_backward", "softmax", "softmax_backward", "layer_norm", "layer_norm_backward",
    "embedding", "embedding_backward", "cross_entropy", "cross_entropy_backward", "attention",
    "attention_backward", "flash_attention", "flash_attention_backward", "adam_update",
    "is_native",
]  # fmt: skip


def is_native(backend: Any, op: str) -> bool:
    return callable(getattr(type(backend), op, None))


def _dispatch(op: str, backend: Any, *args: Any) -> Any:
    if is_native(backend, op):
        prepped = tuple(_ops._prep(backend, a) if isinstance(a, Tensor) else a for a in args)
        return _ops._call(op, backend, *prepped)
    return getattr(composites, op)(*args)


def _check(op: str, *xs: Tensor, index: Tensor | None = None) -> Any:
    """Every operand in ``xs`` must be float with one dtype; ``index`` (ids, targets) only
    has to share the backend here, its dtype and range are checked by ``_ids``."""
    every = xs if index is None else (*xs, index)
    for x in every:
        _require_tensor(op, x)
    backend = same_backend(op, *every)
    _same_dtype(op, *xs)
    _float(op, *xs)
    return backend


def _approx(op: str, approximate: str) -> None:
    if approximate not in GELU_APPROXIMATIONS:
        raise ShapeError(
            f"[{op}] approximate must be one of {GELU_APPROXIMATIONS}; got {approximate!r}"
        )


def _need_rank(op: str, x: Tensor, least: int, what: str) -> None:
    if x.ndim < least:
        raise ShapeError(f"[{op}] {what} needs rank >= {least}; got shape {x.shape}")


def _shape_eq(op: str, x: Tensor, shape: tuple[int, ...], what: str) -> None:
    if x.shape != shape:
        raise ShapeError(f"[{op}] {what} must have shape {shape}; got {x.shape}")


# -- GELU, softmax, LayerNorm --------------------------------------------------------------------
def gelu(x: Tensor, approximate: str = "tanh") -> Tensor:
    backend = _check("gelu", x)
    _approx("gelu", approximate)
    return _dispatch("gelu", backend, x, approximate)


def gelu_backward(dy: Tensor, x: Tensor, approximate: str = "tanh") -> Tensor:
    backend = _check("gelu_backward", dy, x)
    _approx("gelu_backward", approximate)
    _shape_eq("gelu_backward", dy, x.shape, "dy")
    return _dispatch("gelu_backward", backend, dy, x, approximate)


def softmax(x: Tensor) -> Tensor:
    backend = _check("softmax", x)
    _need_rank("softmax", x, 1, "x")
    return _dispatch("softmax", backend, x)


def softmax_backward(dy: Tensor, y: Tensor) -> Tensor:
    backend = _check("softmax_backward", dy, y)
    _need_rank("softmax_backward", y, 1, "y")
    _shape_eq("softmax_backward", dy, y.shape, "dy")
    return _dispatch("softmax_backward", backend, dy, y)


def layer_norm(
    x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5
) -> tuple[Tensor, Tensor, Tensor]:
    backend = _check("layer_norm", x, gamma, beta)
    _need_rank("layer_norm", x, 1, "x")
    c = x.shape[-1]
    _shape_eq("layer_norm", gamma, (c,), "gamma")
    _shape_eq("layer_norm", beta, (c,), "beta")
    if not eps > 0:
        raise ShapeError(f"[layer_norm] eps must be positive; got {eps}")
    return _dispatch("layer_norm", backend, x, gamma, beta, float(eps))


def layer_norm_backward(
    dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    backend = _check("layer_norm_backward", dy, x, gamma, mean, rstd)
    _need_rank("layer_norm_backward", x, 1, "x")
    _shape_eq("layer_norm_backward", dy, x.shape, "dy")
    _shape_eq("layer_norm_backward", gamma, (x.shape[-1],), "gamma")
    _shape_eq("layer_norm_backward", mean, x.shape[:-1], "mean")
    _shape_eq("layer_norm_backward", rstd, x.shape[:-1], "rstd")
    return _dispatch("layer_norm_backward", backend, dy, x, gamma, mean, rstd)


# -- embedding and cross-entropy ---------------------------------------------------------------
def _ids(op: str, backend: Any, ids: Tensor, what: str, low: int, high: int) -> None:
    """Index dtype always; values in ``[low, high)`` when that costs no device sync.

    On backends whose buffers are host numpy arrays the range check is a free ``min``/``max``.
    On device backends reading the ids back would stall the queue on every step (the
    no-round-trip rule), so there the kernels carry the contract instead: they never read
    or write out of bounds, and rows with an out-of-range id come out as zeros."""
    _index(op, ids, what)
    _supported(op, backend, ids.dtype)
    if ids.size and isinstance(ids.storage.buffer, np.ndarray):
        host = ids.numpy()
        lo, hi = int(host.min()), int(host.max())
        if lo < low or hi >= high:
            raise DomainError(
                f"[{op}] {what} must lie in [{low}, {high}); got values in [{lo}, {hi}]"
            )


def embedding(table: Tensor, ids: Tensor) -> Tensor:
    backend = _check("embedding", table, index=ids)
    _rank("embedding", table, 2, "table")
    _ids("embedding", backend, ids, "ids", 0, table.shape[0])
    return _dispatch("embedding", backend, table, ids)


def embedding_backward(dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
    op = "embedding_backward"
    backend = _check(op, dy, index=ids)
    _index(op, ids, "ids")
    _need_rank(op, dy, 1, "dy")
    if dy.shape[:-1] != ids.shape:
        raise ShapeError(f"[{op}] dy {dy.shape} must be ids.shape {ids.shape} + (C,)")
    if num_embeddings <= 0:
        raise ShapeError(f"[{op}] num_embeddings must be positive; got {num_embeddings}")
    _ids(op, backend, ids, "ids", 0, num_embeddings)
    return _dispatch("embedding_backward", backend, dy, ids, int(num_embeddings))


def cross_entropy(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    backend = _check("cross_entropy", logits, index=targets)
    _rank("cross_entropy", logits, 2, "logits [N, V]")
    _index("cross_entropy", targets, "targets")
    _shape_eq("cross_entropy", targets, logits.shape[:1], "targets")
    _ids("cross_entropy", backend, targets, "targets (-1 = ignored)", -1, logits.shape[1])
    return _dispatch("cross_entropy", backend, logits, targets)


def cross_entropy_backward(
    dloss_rows: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
) -> Tensor:
    op = "cross_entropy_backward"
    backend = _check(op, dloss_rows, logits, lse, index=targets)
    _rank(op, logits, 2, "logits [N, V]")
    _index(op, targets, "targets")
    n = logits.shape[:1]
    for t, what in ((dloss_rows, "dloss_rows"), (targets, "targets"), (lse, "lse")):
        _shape_eq(op, t, n, what)
    _ids(op, backend, targets, "targets (-1 = ignored)", -1, logits.shape[1])
    return _dispatch("cross_entropy_backward", backend, dloss_rows, logits, targets, lse)


# -- attention ------------------------------------------------------------------------------------
def _qkv(op: str, q: Tensor, k: Tensor, v: Tensor) -> None:
    for t, what in ((q, "q"), (k, "k"), (v, "v")):
        _rank(op, t, 4, f"{what} [B, H, T, D]")
    if not (q.shape == k.shape == v.shape):
        raise ShapeError(
            f"[{op}] q, k, v must share shape [B, H, T, D]; got {q.shape}, {k.shape}, {v.shape}"
        )


def _scale(op: str, scale: Any) -> float:
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        raise DTypeError(f"[{op}] scale must be a Python number; got {type(scale).__name__}")
    return float(scale)


def attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool = True
) -> tuple[Tensor, Tensor]:
    backend = _check("attention", q, k, v)
    _qkv("attention", q, k, v)
    return _dispatch("attention", backend, q, k, v, _scale("attention", scale), bool(causal))


def attention_backward(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    backend = _check("attention_backward", dout, q, k, v, probs)
    _qkv("attention_backward", q, k, v)
    _shape_eq("attention_backward", dout, q.shape, "dout")
    b, h, t, _ = q.shape
    _shape_eq("attention_backward", probs, (b, h, t, t), "probs")
    s = _scale("attention_backward", scale)
    return _dispatch("attention_backward", backend, dout, q, k, v, probs, s)


def flash_attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool = True
) -> tuple[Tensor, Tensor]:
    backend = _check("flash_attention", q, k, v)
    _qkv("flash_attention", q, k, v)
    s = _scale("flash_attention", scale)
    return _dispatch("flash_attention", backend, q, k, v, s, bool(causal))


def flash_attention_backward(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    scale: float,
    causal: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    op = "flash_attention_backward"
    backend = _check(op, dout, q, k, v, out, lse)
    _qkv(op, q, k, v)
    _shape_eq(op, dout, q.shape, "dout")
    _shape_eq(op, out, q.shape, "out")
    _shape_eq(op, lse, q.shape[:-1], "lse")
    s = _scale(op, scale)
    return _dispatch(op, backend, dout, q, k, v, out, lse, s, bool(causal))


# -- optimizer ------------------------------------------------------------------------------------
def adam_update(
    param: Tensor,
    grad: Tensor,
    m: Tensor,
    v: Tensor,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    step: int = 1,
) -> None:
    """AdamW step in place on ``param``, ``m`` and ``v``; bumps ``param``'s version."""
    op = "adam_update"
    backend = _check(op, param, grad, m, v)
    for t, what in ((grad, "grad"), (m, "m"), (v, "v")):
        _shape_eq(op, t, param.shape, what)
    for t, what in ((param, "param"), (m, "m"), (v, "v")):
        if not t.is_dense or t.storage.size != t.size:
            raise ShapeError(f"[{op}] {what} must be a dense tensor owning its storage")
    if step < 1:
        raise ShapeError(f"[{op}] step counts from 1; got {step}")
    args = (float(lr), float(beta1), float(beta2), float(eps), float(weight_decay), int(step))
    _dispatch(op, backend, param, grad, m, v, *args)
    param.bump_version()
    m.bump_version()
    v.bump_version()
