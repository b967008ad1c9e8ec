"""Loss heads: what turns the logits of a batch into a loss and the network's gradients.

The default runs autograd's ``cross_entropy`` and backward from the scalar loss. Any object
with ``loss_and_grad(logits [N, V], targets [N]) -> (loss, dlogits)`` (raw Tensors, e.g. a
compiled ``riftco.symbolic`` objective) works too: its ``dlogits`` seeds
``logits.backward(seed=dlogits)`` through the network. Both take the fp16 loss scale as
``scale`` (the seed they multiply), so mixed precision needs nothing else from a head.
"""

from __future__ import annotations

from typing import Any, Protocol

from .. import ops
from ..autograd import Variable, cross_entropy
from ..dtypes import compute_dtype
from ..tensor import Tensor


class Objective(Protocol):
    def loss_and_grad(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]: ...


class CrossEntropyHead:
    """Default head: autograd cross-entropy, backward from the scalar loss."""

    def loss_and_backward(
        self, logits: Variable, targets: Tensor, scale: float | None = None
    ) -> Tensor:
        loss = cross_entropy(logits, targets)
        loss.backward(None if scale is None else _scaled_ones(loss.value, scale))
        return loss.value


class SeededHead:
    """An objective that returns d(loss)/d(logits) itself; that gradient seeds the network."""

    def __init__(self, objective: Objective) -> None:
        self.objective = objective

    def loss_and_backward(
        self, logits: Variable, targets: Tensor, scale: float | None = None
    ) -> Tensor:
        z = logits.value
        # Half logits reach the objective in float32 (exact), as cross_entropy computes its
        # loss rows; the seed is scaled there and rounded once to the logits' dtype.
        loss, dz = self.objective.loss_and_grad(ops.cast(z, compute_dtype(z.dtype)), targets)
        seed = dz if scale is None else ops.mul_scalar(dz, scale)
        logits.backward(seed=ops.cast(seed, z.dtype))
        return loss


def _scaled_ones(like: Tensor, scale: float) -> Tensor:
    """The backward seed ``scale`` (a loss scale): a product on the device, so a captured
    step refills the scale it gets as an argument (a fill would freeze the recorded one)."""
    return ops.mul_scalar(ops.full_like(like, 1.0), scale)


def label_smoothing_head(vocab: int, eps: float) -> Objective:
    """Cross-entropy against ``(1 - eps) * onehot + eps / V``, differentiated once by
    riftco.symbolic: a new loss in a few builder lines, no new autograd rule. Validation
    still reports plain cross-entropy, so runs with and without smoothing compare."""
    from ..symbolic import label_smoothing_objective

    return label_smoothing_objective(vocab, eps)


def as_head(head: Any) -> Any:
    if head is None:
        return CrossEntropyHead()
    if hasattr(head, "loss_and_backward"):
        return head
    if hasattr(head, "loss_and_grad"):
        return SeededHead(head)
    raise TypeError(
        f"[train] a loss head needs loss_and_grad() or loss_and_backward(); got {head!r}"
    )
