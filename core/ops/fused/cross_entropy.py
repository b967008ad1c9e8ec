"""Softmax cross-entropy over rows of logits, and its backward.

``cross_entropy(logits[N, V], targets[N]) -> (loss_rows[N], lse[N])`` with
``loss_rows[i] = lse[i] - logits[i, t_i]`` and 0 where ``t_i == -1`` (ignored); ``lse`` is
the natural-log log-sum-exp of every row, ignored or not, computed with the row max
subtracted (logits of 1e4 are fine). A ``-inf`` logit elsewhere than the target gives a
finite loss; at the target, ``+inf``. Only -1 means ignored: any other target outside
``[0, V)`` is a ``DomainError`` (at once for host-resident targets, at the next sync on a
device). V = 0 is refused by core; N = 0 gives empty results.
``cross_entropy_backward(dloss_rows, logits, targets, lse) = dloss_rows[i] *
(softmax(logits[i]) - onehot(t_i))``, 0 on ignored rows.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...dtypes import compute_dtype
from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.binary import add, mul, sub
from ..primitive.memory import full_like
from ..primitive.reduce import max, sum
from ..primitive.select import where
from ..primitive.unary import exp, log
from ..rows import along_rows
from .embedding import check_ids, defer_range, one_hot

_SAMPLES = samples_module(__name__)


class CrossEntropyMethods(Protocol):
    def cross_entropy(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        """``(loss_rows[N], lse[N])`` for ``logits[N, V]`` (V >= 1) and integer
        ``targets[N]``; -1 means ignored (loss 0); both outputs in the logits'
        compute dtype (float32 for float16/bfloat16 logits: a loss and a log-sum-exp rounded
        to 2^-8 would move every probability the backward rebuilds from it).

        ``lse[i] = m_i + log(sum_j exp(logits[i, j] - m_i))`` (natural log, ``m_i`` the row
        max, so logits of 1e4 are fine), for every row, ignored or not;
        ``loss_rows[i] = lse[i] - logits[i, t_i]``, 0 where ``t_i == -1``. Any other target
        outside ``[0, V)`` is a ``DomainError``.

        Special values: a NaN logit makes its row's ``lse`` and loss NaN; a ``+inf`` logit
        makes them NaN too (``inf - inf`` after the max); a ``-inf`` logit elsewhere than
        the target leaves the loss finite, at the target it makes the loss ``+inf``; an all
        ``-inf`` row has NaN ``lse``. An ignored row's loss is 0 even then. ``-0.0`` is 0.0.
        N = 0 gives empty results; V = 0 is refused by core.

        Composite: primitives only (``max``, ``exp``, ``sum``, ``log``, a one-hot pick)."""
        ...

    def cross_entropy_backward(
        self, dloss_rows: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
    ) -> Tensor:
        """``dlogits[N, V] = dloss_rows[i] * (softmax(logits[i]) - onehot(t_i))``; ignored
        rows are 0. ``softmax(logits[i])`` is ``exp(logits[i] - lse[i])`` from the forward's
        ``lse``.

        Special values: IEEE: a NaN in a row's logits, ``lse`` or ``dloss_rows`` makes that
        row NaN, an ignored row included (its zero is a product with 0, and ``0 * NaN`` is
        NaN); a ``-inf`` logit's entry is ``dloss_rows[i] * (0 - onehot)``. ``-0.0`` is
        0.0. N = 0 gives an empty result.

        Composite: primitives only."""
        ...


def _logits(op: str, logits: Tensor) -> int:
    checks.rank(op, logits, 2, "logits [N, V]")
    if logits.shape[1] == 0:
        raise ShapeError(f"[{op}] needs at least one class (V >= 1); got logits {logits.shape}")
    return logits.shape[1]


def cross_entropy(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    op = "cross_entropy"
    checks.tensor(op, targets, "targets")
    backend = checks.float_operands(op, logits)
    checks.same_backend(op, logits, targets)
    v = _logits(op, logits)
    checks.index(op, targets, "targets")
    checks.shape_is(op, targets, logits.shape[:1], "targets")
    check_ids(op, backend, targets, "targets (-1 = ignored)", -1, v)
    row = Out(logits.shape[:1], compute_dtype(logits.dtype))
    return dispatch(CROSS_ENTROPY, backend, (logits, targets), (row, row))


def cross_entropy_backward(
    dloss_rows: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
) -> Tensor:
    op = "cross_entropy_backward"
    checks.tensor(op, targets, "targets")
    backend = checks.float_operands(op, logits)
    checks.statistics(op, logits, dloss_rows=dloss_rows, lse=lse)
    checks.same_backend(op, logits, targets)
    v = _logits(op, logits)
    checks.index(op, targets, "targets")
    n = logits.shape[:1]
    for t, what in ((dloss_rows, "dloss_rows"), (targets, "targets"), (lse, "lse")):
        checks.shape_is(op, t, n, what)
    check_ids(op, backend, targets, "targets (-1 = ignored)", -1, v)
    args = (dloss_rows, logits, targets, lse)
    return dispatch(CROSS_ENTROPY_BACKWARD, backend, args, Out(logits.shape, logits.dtype))


# -- composites ------------------------------------------------------------------------------------
def logsumexp_rows(x: Tensor) -> Tensor:
    """Row log-sum-exp over the last axis, max-subtracted."""
    m = max(x, -1, keepdims=True)
    e = exp(sub(x, along_rows(m, x.shape)))
    return add(log(sum(e, -1)), m.reshape(x.shape[:-1]))


def cross_entropy_composite(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    n, v = logits.shape
    defer_range("cross_entropy", targets, logits, "targets (-1 = ignored)", -1, v)
    lse = logsumexp_rows(logits)
    onehot = one_hot(targets, v, logits)
    zeros = full_like(logits, 0.0, (1, 1)).broadcast_to(logits.shape)
    # select the target logit, never multiply: 0 * -inf would be NaN
    picked = sum(where(onehot, logits, zeros), -1)
    keep = sum(onehot, -1)  # 1 for a real target, 0 for an ignored (-1) one
    return where(keep, sub(lse, picked), full_like(lse, 0.0)), lse


def cross_entropy_backward_composite(
    dloss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
) -> Tensor:
    n, v = logits.shape
    defer_range("cross_entropy_backward", targets, logits, "targets (-1 = ignored)", -1, v)
    probs = exp(sub(logits, along_rows(lse, logits.shape)))
    onehot = one_hot(targets, v, logits)
    keep = sum(onehot, -1)
    scale = along_rows(mul(dloss, keep), logits.shape)
    return mul(sub(probs, onehot), scale)


def _cross_entropy_vjp(g: Tensor, args: Any, outs: Any, needs: Any) -> tuple[Tensor]:
    """``g`` is the gradient of the loss rows; the saved ``lse`` spares the backward a
    second log-sum-exp."""
    logits, targets = args
    return (cross_entropy_backward(g, logits, targets, outs[1]),)


def _cost(n_in: int) -> Any:
    return lambda args: (n_in * args[-3 if n_in > 2 else 0].nbytes, 5 * args[0].size)


CROSS_ENTROPY = OpUnit(
    "cross_entropy", "fused", CrossEntropyMethods.cross_entropy, module="cross_entropy",
    function=cross_entropy, outputs=("loss_rows", "lse"), composite=cross_entropy_composite,
    vjp=_cross_entropy_vjp, differentiable=(0,),
    nan="a NaN logit makes its row's loss and lse NaN",
    tolerance=Tolerances(Tolerance(2e-5, 2e-5), Tolerance(1e-10, 1e-11),
                         why="log-sum-exp over the row; lse carries ulps of the row max"),
    cost=_cost(1),
    testing=_SAMPLES,
)  # fmt: skip
CROSS_ENTROPY_BACKWARD = OpUnit(
    "cross_entropy_backward", "fused",
    CrossEntropyMethods.cross_entropy_backward, module="cross_entropy",
    function=cross_entropy_backward,
    outputs=("dlogits",), composite=cross_entropy_backward_composite,
    tolerance=Tolerances(Tolerance(1e-6, 1e-4), Tolerance(1e-11, 1e-10),
                         why="exp(logits - lse) carries lse's ulps"),
    cost=_cost(4),
    testing=_SAMPLES,
)  # fmt: skip

register(CROSS_ENTROPY, CROSS_ENTROPY_BACKWARD)
