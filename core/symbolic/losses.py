"""Compiled objectives as a trainer's loss head.

The division of labour is the seed's: the network's own backward handles the layers, and
the symbolic engine supplies only d(loss)/d(logits), which seeds that backward
(``logits_var.backward(seed=grad)``). The loss is differentiated and compiled once, when
the objective is built; every batch then only binds tensors and runs the flat schedule.

Batch reduction: node shapes describe one sample, so a batch of N logits gives N per-sample
losses. The batch loss is their **mean** (``reduction="mean"``, like
``riftco.autograd.cross_entropy``) or their sum; the gradient is scaled to match. With
integer targets, a target of -1 marks a row to ignore, and the mean runs over the other
rows, as the autograd cross-entropy does. Any other target outside ``[0, V)`` is a
``DomainError``, as in autograd: checked at once (numpy ``min``/``max``) when the targets
live in a host buffer, and otherwise deferred through ``riftco.autograd``'s value checks
(no device sync per batch), so it is raised by the next ``backward()`` (the trainer's
``logits.backward(seed=dlogits)``), ``Variable.numpy()``/``.item()`` or
``riftco.autograd.check_domain()``, before any gradient changes. Until then the row counts
as kept with an all-zero one-hot; no kernel ever indexes with a target.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import ops
from ..autograd import domain
from ..errors import DTypeError, ShapeError
from ..ops import full_like
from ..tensor import Tensor
from .builder import Builder
from .compile import Program
from .differentiate import differentiate
from .nodes import Node

_COLUMNS: dict[tuple[int, str, int], Tensor] = {}


def _columns(like: Tensor, num: int) -> Tensor:
    """``arange(num)`` on ``like``'s device and dtype, uploaded once per backend."""
    key = (id(like.backend), like.dtype.str, num)
    cols = _COLUMNS.get(key)
    if cols is None or cols.backend is not like.backend:
        cols = like.backend.from_numpy(np.arange(num, dtype=like.dtype))
        _COLUMNS[key] = cols
    return cols


def _float_ids(ids: Tensor, like: Tensor) -> Tensor:
    """Integer ids flattened to ``[N]`` in ``like.dtype`` (exact below 2**24 in float32)."""
    if ids.dtype.kind not in "iu":
        raise DTypeError(f"[one_hot] ids must be an integer Tensor; got {ids.dtype}")
    return ops.cast(ids.reshape(-1).contiguous(), like.dtype)


def _hot_rows(flat: Tensor, num: int, like: Tensor) -> Tensor:
    n = flat.shape[0]
    cols = _columns(like, num).reshape(1, num).broadcast_to((n, num))
    return ops.compare(flat.reshape(n, 1).broadcast_to((n, num)), cols, "eq")


def _check_ids(op: str, ids: Tensor, num: int, flat: Tensor) -> None:
    domain.require_in_range(op, "targets", ids, -1, num, flat, note=" (-1 marks an ignored row)")


def one_hot(ids: Tensor, num: int, like: Tensor) -> Tensor:
    """``[N, num]`` in ``like.dtype``: 1 at each id, an all-zero row for id -1.

    Built on the device from a comparison with ``arange`` (the composite one-hot idea):
    the targets never make a round trip through the host. Any other id outside
    ``[0, num)`` is a DomainError (deferred on device buffers, see the module docstring).
    """
    flat = _float_ids(ids, like)
    _check_ids("one_hot", ids, num, flat)
    return _hot_rows(flat, num, like)


def smoothed_targets(ids: Tensor, vocab_size: int, eps: float, like: Tensor) -> Tensor:
    """``(1 - eps) * onehot + eps / V`` as a dense ``[N, V]`` tensor, on the device."""
    hot = one_hot(ids, vocab_size, like)
    return ops.add_scalar(ops.mul_scalar(hot, 1.0 - eps), eps / vocab_size)


class CompiledObjective:
    """A per-sample scalar loss, its gradient graph, and their compiled schedules.

    ``loss`` is a node of shape ``()``; ``wrt`` the variable the trainer binds its output
    to; ``target`` the variable receiving the ground truth (dense, shaped like ``wrt``).
    """

    def __init__(
        self, loss: Node, wrt: Node, target: Node | None = None, reduction: str = "mean"
    ) -> None:
        if reduction not in ("mean", "sum"):
            raise ShapeError(
                f"[CompiledObjective] reduction must be 'mean' or 'sum'; got {reduction!r}"
            )
        self.loss, self.wrt, self.target, self.reduction = loss, wrt, target, reduction
        self.gradient = differentiate(loss, wrt)
        self.loss_program = Program(loss)
        self.gradient_program = Program(self.gradient)
        self.program = Program(loss, self.gradient)  # one pass: shared nodes run once

    def evaluate(self, bindings: Mapping[Node | str, Tensor], out: Tensor | None = None) -> Tensor:
        """The gradient for ``bindings`` (per sample), written into ``out`` if given."""
        return self.gradient_program.evaluate(bindings, out)[0]

    def loss_and_grad(
        self, logits: Tensor, targets: Tensor, grad_out: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """(batch loss, d(batch loss)/d(logits)) for logits ``[..., V]``.

        ``targets`` is either integer class ids shaped ``logits.shape[:-1]`` (turned into a
        one-hot on the device) or a dense float tensor shaped like ``logits``.
        """
        if self.target is None:
            raise ShapeError("[loss_and_grad] this objective has no target variable")
        v = self.wrt.shape[-1] if self.wrt.shape else 1
        if logits.shape[-1:] != self.wrt.shape:
            raise ShapeError(
                f"[loss_and_grad] logits {logits.shape} must end with {self.wrt.shape}"
            )
        z = logits.reshape(-1, v)
        n = z.shape[0]
        keep = None
        if targets.dtype.kind in "iu":
            if targets.shape != logits.shape[:-1]:
                raise ShapeError(
                    f"[loss_and_grad] integer targets {targets.shape} must have shape "
                    f"{logits.shape[:-1]} for logits {logits.shape}"
                )
            flat = _float_ids(targets, z)
            _check_ids("cross_entropy", targets, v, flat)
            t = _hot_rows(flat, v, z)
            keep = ops.compare(flat, full_like(z, -1.0, (n,)), "ne")  # 0 for an ignored row
        else:
            if targets.shape != logits.shape:
                raise ShapeError(
                    f"[loss_and_grad] dense targets {targets.shape} must match logits "
                    f"{logits.shape}"
                )
            t = targets.reshape(-1, v)
        per_loss, per_grad = self.program.evaluate({self.wrt: z, self.target: t})
        if keep is None:
            scale = 1.0 / n if self.reduction == "mean" else 1.0
            loss = ops.mul_scalar(ops.sum(per_loss), scale)
            grad = ops.mul_scalar(per_grad, scale)
        else:
            weights = keep
            if self.reduction == "mean":
                count = ops.maximum(ops.sum(keep), full_like(z, 1.0, ()))  # all ignored: 0
                weights = ops.div(keep, count.reshape(1).broadcast_to((n,)))
            # select, then weight (``where`` with the 0/1 mask as its own "else"): an ignored
            # row contributes an exact 0 even when its logits hold inf or NaN
            loss = ops.sum(ops.mul(ops.where(keep, per_loss, keep), weights))
            keep_nv = keep.reshape(n, 1).broadcast_to((n, v))
            w_nv = weights.reshape(n, 1).broadcast_to((n, v))
            grad = ops.mul(ops.where(keep_nv, per_grad, keep_nv), w_nv)
        grad = grad.reshape(logits.shape)
        if grad_out is not None:
            grad = ops.assign_(grad_out, grad)
        return loss, grad


def softmax_cross_entropy_objective(vocab_size: int, reduction: str = "mean") -> CompiledObjective:
    """Plain softmax cross-entropy over ``vocab_size`` classes, as a compiled objective."""
    return label_smoothing_objective(vocab_size, 0.0, reduction)


def label_smoothing_objective(
    vocab_size: int, eps: float, reduction: str = "mean"
) -> CompiledObjective:
    """Softmax cross-entropy against ``(1 - eps) * onehot + eps / V``.

    The smoothing lives in the graph (two scalar ops per batch on the device), so the
    target variable receives the plain one-hot; its gradient is ``softmax - smoothed``.
    """
    if not 0.0 <= eps < 1.0:
        raise ShapeError(f"[label_smoothing_objective] eps must be in [0, 1); got {eps}")
    g = Builder("label_smoothing" if eps else "cross_entropy")
    logits = g.variable(vocab_size, "logits")
    onehot = g.variable(vocab_size, "onehot")
    target = g.add(g.mul(1.0 - eps, onehot), eps / vocab_size) if eps else onehot
    return CompiledObjective(g.softmax_cross_entropy(logits, target), logits, onehot, reduction)
