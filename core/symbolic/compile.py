"""Compile expression DAGs into a flat schedule and evaluate it with raw tensor ops.

Compiling is a post-order walk with a visited set: every node appears once, after its
children. Evaluating walks that list with a per-node cache, so a node shared by the loss
and its gradient (``y - y_hat`` under both the norm and the norm's derivative) runs once
per evaluation. Every numerical step goes through ``riftco.ops``, so the same
program runs on any backend.

A value in the cache is a Tensor or a Python float. A float means "this value everywhere":
constants stay one scalar (the seed's constant vector) and meet tensors through
``add_scalar``/``mul_scalar`` instead of being materialised. The same kernels, fed floats
only, are the simplifier's constant folder.

Batching: a bound tensor has the variable's per-sample shape or one extra leading batch
axis. Per-sample reductions reduce the trailing (per-sample) axes, so a batch of N gives
N per-sample losses in one pass. An unbatched operand meeting a batched one is broadcast
as a view.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Union

import numpy as np

from .. import ops
from ..dtypes import is_float
from ..errors import DomainError, DTypeError, RiftcoError, ShapeError
from ..ops import full_like
from ..tensor import Tensor
from .nodes import Node, NodeType, post_order

Value = Union[Tensor, float]  # noqa: UP007 - a runtime alias
Kernel = Callable[[Node, list[Value]], Value]


# -- small helpers ------------------------------------------------------------------------------
def _align(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Broadcast the unbatched one of two tensors to the other's (batched) shape, as a view."""
    if a.shape == b.shape:
        return a, b
    if a.ndim < b.ndim:
        return a.broadcast_to(b.shape), b
    return a, b.broadcast_to(a.shape)


def _per_sample_axes(x: Tensor, rank: int) -> tuple[int, ...]:
    return tuple(range(x.ndim - rank, x.ndim))


def _expand(s: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A per-sample scalar (shape () or (N,)) broadcast over per-sample axes to ``shape``."""
    rank = len(shape) - s.ndim
    return s.reshape(s.shape + (1,) * rank).broadcast_to(shape)


# -- kernels: one per node type ------------------------------------------------------------
def _commutative(
    args: list[Value],
    on_floats: Callable[[float, float], float],
    on_tensors: Callable[[Tensor, Tensor], Tensor],
    with_scalar: Callable[[Tensor, float], Tensor],
) -> Value:
    """``+`` or ``*``: Python on two constants, the scalar op when one side is a constant
    (so it is never materialised), the tensor op on aligned operands otherwise."""
    a, b = args
    if isinstance(a, float) and isinstance(b, float):
        return on_floats(a, b)
    if isinstance(a, float):
        a, b = b, a  # commutative: the tensor first
    if isinstance(b, float):
        return with_scalar(a, b)  # type: ignore[arg-type]
    return on_tensors(*_align(a, b))  # type: ignore[arg-type]


def _add(node: Node, args: list[Value]) -> Value:
    return _commutative(args, operator.add, ops.add, ops.add_scalar)


def _mul(node: Node, args: list[Value]) -> Value:
    return _commutative(args, operator.mul, ops.mul, ops.mul_scalar)


def _sub(node: Node, args: list[Value]) -> Value:
    a, b = args
    if isinstance(a, float) and isinstance(b, float):
        return a - b
    if isinstance(a, float):
        return ops.add_scalar(ops.neg(b), a)  # type: ignore[arg-type]
    if isinstance(b, float):
        return ops.add_scalar(a, -b)
    return ops.sub(*_align(a, b))


def _scale(node: Node, args: list[Value]) -> Value:
    s, v = args
    if isinstance(s, float):
        return s * v if isinstance(v, float) else ops.mul_scalar(v, s)
    batched_v = isinstance(v, Tensor) and v.ndim > len(node.shape)
    batch = s.shape if s.ndim else (v.shape[:1] if batched_v else ())  # type: ignore[union-attr]
    full = batch + node.shape
    s_full = s.reshape(s.shape + (1,) * len(node.shape)).broadcast_to(full)
    if isinstance(v, float):
        return ops.mul_scalar(s_full, v)
    return ops.mul(v if v.shape == full else v.broadcast_to(full), s_full)


def _pow(node: Node, args: list[Value]) -> Value:
    (x,), p = args, node.number
    if isinstance(x, float):
        if x < 0 and not p.is_integer():
            raise DomainError(f"[pow] {x} ** {p} is not real")
        if x == 0 and p < 0:
            raise DomainError(f"[pow] 0 ** {p} is undefined")
        return float(x**p)
    return ops.pow_scalar(x, p)


def _exp(node: Node, args: list[Value]) -> Value:
    (x,) = args
    return math.exp(x) if isinstance(x, float) else ops.exp(x)


def _log(node: Node, args: list[Value]) -> Value:
    (x,) = args
    if isinstance(x, float):
        if x <= 0:
            raise DomainError(f"[log] needs a positive constant; got {x}")
        return math.log(x)
    return ops.log(x)


def _sum(node: Node, args: list[Value]) -> Value:
    (x,), child = args, node.children[0]
    if isinstance(x, float):
        return x * child.size
    rank = len(child.shape)
    return ops.sum(x, _per_sample_axes(x, rank)) if rank else x


def _mean(node: Node, args: list[Value]) -> Value:
    (x,), child = args, node.children[0]
    if isinstance(x, float):
        return x
    rank = len(child.shape)
    return ops.mean(x, _per_sample_axes(x, rank)) if rank else x


def _lp_norm(node: Node, args: list[Value]) -> Value:
    (x,), child, p = args, node.children[0], node.number
    if isinstance(x, float):
        return float(abs(x) * child.size ** (1.0 / p))
    axes = _per_sample_axes(x, len(child.shape))
    if not axes:
        return ops.abs(x)
    if p == 2:
        return ops.sqrt(ops.sum(ops.mul(x, x), axes))
    if p == 1:
        return ops.sum(ops.abs(x), axes)
    return ops.pow_scalar(ops.sum(ops.pow_scalar(ops.abs(x), p), axes), 1.0 / p)


def _lp_norm_der(node: Node, args: list[Value]) -> Value:
    """``x |x|^(p-2) / ||x||^(p-1)``; 0 where the norm is 0 (the subgradient at the origin).

    Evaluated as ``r |r|^(p-2)`` with ``r = x / ||x||``: since ``|r| <= 1`` and ``p >= 1``
    nothing overflows, whereas ``||x||^(1-p)`` is ``inf`` at the origin for p > 2 (and for
    tiny x) and ``0 * inf`` is NaN. A zero norm is divided as 1 (then ``x`` is all zero, so
    ``r`` is 0), and ``|r|`` is floored at the dtype's smallest normal number so the
    negative power of p < 2 stays finite where it multiplies ``r == 0``."""
    x, norm = args
    p = node.number
    if isinstance(x, float):  # a constant vector: its norm is a float too
        assert isinstance(norm, float)
        if x == 0 or norm == 0:
            return 0.0
        r_c = x / norm
        return float(r_c * abs(r_c) ** (p - 2))
    if isinstance(norm, float):
        r = ops.mul_scalar(x, 1.0 / norm if norm != 0 else 1.0)
    else:
        zero = ops.compare(norm, full_like(norm, 0.0), "eq")  # 1 exactly where norm == 0
        r = ops.div(x, _expand(ops.add(norm, zero), x.shape))
    if p == 2:
        return r
    tiny = float(np.finfo(r.dtype).tiny)
    power = ops.pow_scalar(ops.maximum(ops.abs(r), full_like(r, tiny)), p - 2)
    return ops.mul(r, power)


def _softmax(node: Node, args: list[Value]) -> Value:
    (x,) = args
    return 1.0 / node.shape[-1] if isinstance(x, float) else ops.softmax(x)


def _softmax_ce(node: Node, args: list[Value]) -> Value:
    """``logsumexp(z) - <t, z>`` with the max subtracted first: finite for any finite z.

    ``<t, z>`` multiplies ``t`` only by logits selected where ``t`` is non-zero (``where``
    puts 0 elsewhere; never ``0 * z``, which is NaN for ``z = -inf``), so a ``-inf`` logit
    off the target leaves the loss finite, while one at the target (or at any entry of a
    smoothed target) gives ``+inf``, the true cross-entropy. A NaN logit still reaches the
    loss through the log-sum-exp."""
    z, t = args
    width = node.children[0].shape[-1]
    if isinstance(z, float):
        if isinstance(t, float):
            return z + math.log(width) - t * z * width
        z = full_like(t, z)
    m = ops.max(z, -1, keepdims=True)
    e = ops.exp(ops.sub(z, m.broadcast_to(z.shape)))
    lse = ops.add(ops.log(ops.sum(e, -1)), m.reshape(m.shape[:-1]))
    if isinstance(t, float):
        if t == 0:
            return lse
        tz = ops.mul_scalar(ops.sum(z, -1), t)
    else:
        t, z = _align(t, z)
        tz = ops.sum(ops.mul(t, ops.where(t, z, t)), -1)  # where t == 0: t * t == 0
    return ops.sub(*_align(lse, tz))


KERNELS: dict[NodeType, Kernel] = {
    NodeType.ADD: _add,
    NodeType.SUB: _sub,
    NodeType.MUL: _mul,
    NodeType.SCALE: _scale,
    NodeType.POW: _pow,
    NodeType.EXP: _exp,
    NodeType.LOG: _log,
    NodeType.SUM: _sum,
    NodeType.MEAN: _mean,
    NodeType.LP_NORM: _lp_norm,
    NodeType.LP_NORM_DER: _lp_norm_der,
    NodeType.SOFTMAX: _softmax,
    NodeType.SOFTMAX_CE: _softmax_ce,
}


def fold(node: Node, values: list[float]) -> float:
    """The value of ``node`` when every child is a constant: the constant folder."""
    return float(KERNELS[node.kind](node, list(values)))  # type: ignore[arg-type]


# -- the compiled program ------------------------------------------------------------------
Bindings = Mapping[Union[Node, str], Tensor]  # noqa: UP007


class Program:
    """A flat evaluation order for one or more roots that may share nodes."""

    def __init__(self, *roots: Node) -> None:
        if not roots:
            raise ShapeError("[compile] needs at least one root node")
        self.roots = roots
        self.schedule = post_order(*roots)
        index = {id(n): i for i, n in enumerate(self.schedule)}
        self._root_idx = [index[id(r)] for r in roots]
        self._steps = [
            (n, KERNELS.get(n.kind), tuple(index[id(c)] for c in n.children)) for n in self.schedule
        ]
        self.variables = [n for n in self.schedule if n.kind is NodeType.VAR]
        self._index = index
        self._evals = [0] * len(self.schedule)

    # -- evaluation counters (tests check sharing with them) --------------------------------
    def evaluations(self, node: Node) -> int:
        """How many times ``node`` ran since the program was built (or counters reset)."""
        return self._evals[self._index[id(node)]]

    def counts_by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for node, count in zip(self.schedule, self._evals, strict=True):
            out[node.kind.value] = out.get(node.kind.value, 0) + count
        return out

    def reset_counts(self) -> None:
        self._evals = [0] * len(self.schedule)

    # -- binding and evaluation --------------------------------------------------------------
    def _bind(self, bindings: Bindings) -> tuple[dict[int, Tensor], Tensor | None, int | None]:
        bound: dict[int, Tensor] = {}
        batch: int | None = None
        first: Tensor | None = None
        for var in self.variables:
            t = bindings.get(var)
            if t is None:
                t = bindings.get(var.name)  # type: ignore[arg-type]
            if t is None:
                raise RiftcoError(f"[evaluate] no tensor bound to variable {var.label()}")
            if not isinstance(t, Tensor):
                raise DTypeError(f"[evaluate] {var.label()} must be bound to a Tensor")
            if not is_float(t.dtype):
                raise DTypeError(f"[evaluate] {var.label()} needs a float tensor; got {t.dtype}")
            if t.shape != var.shape:
                if t.shape[1:] != var.shape:
                    raise ShapeError(
                        f"[evaluate] {var.label()} has shape {var.shape} per sample; bound "
                        f"tensor has shape {t.shape} (expected {var.shape} or [N, *{var.shape}])"
                    )
                if batch is not None and t.shape[0] != batch:
                    raise ShapeError(
                        f"[evaluate] batch sizes differ: {var.label()} is bound with "
                        f"{t.shape[0]} samples, an earlier variable with {batch}"
                    )
                batch = t.shape[0]
            if first is None:
                first = t
            ops.same_backend("evaluate", first, t)
            bound[id(var)] = t
        if first is None:  # e.g. a gradient that folded to a constant: use what was passed
            for key, t in bindings.items():
                if isinstance(t, Tensor):
                    first = t
                    if isinstance(key, Node) and t.shape[1:] == key.shape:
                        batch = t.shape[0]
                    break
        return bound, first, batch

    def evaluate(
        self,
        bindings: Bindings,
        out: Tensor | Sequence[Tensor | None] | None = None,
        like: Tensor | None = None,
    ) -> list[Tensor]:
        """Values of the roots. Bound tensors are used by reference, never copied.

        ``out`` (one tensor per root, or a tensor when there is one root) receives the
        results in place. ``like`` supplies backend and dtype when no variable is bound.
        """
        bound, first, batch = self._bind(bindings)
        values: list[Value] = [0.0] * len(self.schedule)  # the per-node cache
        evals = self._evals
        for i, (node, kernel, kids) in enumerate(self._steps):
            if kernel is None:
                values[i] = bound[id(node)] if node.kind is NodeType.VAR else node.number
            else:
                values[i] = kernel(node, [values[j] for j in kids])
            evals[i] += 1
        outs = self._outs(out)
        ref = first if first is not None else like
        results = []
        for root, i, dst in zip(self.roots, self._root_idx, outs, strict=True):
            results.append(self._deliver(root, values[i], dst, ref, batch))
        return results

    def _outs(self, out: Tensor | Sequence[Tensor | None] | None) -> list[Tensor | None]:
        if out is None:
            return [None] * len(self.roots)
        if isinstance(out, Tensor):
            out = [out]
        outs = list(out)
        if len(outs) != len(self.roots):
            raise ShapeError(f"[evaluate] got {len(outs)} outputs for {len(self.roots)} roots")
        return outs

    @staticmethod
    def _deliver(
        root: Node, value: Value, dst: Tensor | None, like: Tensor | None, batch: int | None
    ) -> Tensor:
        if isinstance(value, float):
            if dst is not None:
                return ops.fill_(dst, value)
            if like is None:
                raise RiftcoError("[evaluate] a constant result needs like= (backend, dtype)")
            shape = ((batch,) if batch is not None else ()) + root.shape
            return full_like(like, value, shape)
        if dst is None:
            return value
        if dst.shape != value.shape:
            value = value.broadcast_to(dst.shape)
        return ops.assign_(dst, value)


def compile_graph(*roots: Node) -> Program:
    """Schedule ``roots`` (and everything they share) into one flat program."""
    return Program(*roots)
