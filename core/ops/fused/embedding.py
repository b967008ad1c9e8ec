"""Embedding gather and its scatter-add backward.

``embedding(table[V, C], ids[...]) -> [..., C]``; ``embedding_backward(dy[..., C], ids, V)
-> dtable[V, C]`` adds every row of ``dy`` into its id's row: repeated ids accumulate and
the result is deterministic (the same bits on every run: a fixed summation order, no
float atomics). Ids outside ``[0, V)`` are a ``DomainError``: raised at once where the ids
live in host memory, at the next sync point on a device (kernels clamp and raise a flag,
never touching memory out of bounds). C = 0 and zero ids give empty results.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ...errors import DomainError, OutOfMemoryError, ShapeError
from ...tensor import Tensor
from .. import checks, deferred
from ..capture_hooks import host
from ..dispatch import Out, dispatch
from ..opunit import EXACT_TOLERANCES, OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.binary import add
from ..primitive.matmul import matmul
from ..primitive.memory import upload
from ..primitive.reduce import max
from ..primitive.select import cast, compare

if TYPE_CHECKING:
    from ..samples import Example

_SAMPLES = samples_module(__name__)


class EmbeddingMethods(Protocol):
    def embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        """Rows of ``table[V, C]`` at integer ``ids[...]``: shape ``ids.shape + (C,)``, dtype
        of ``table``: ``out[i..., c] = table[ids[i...], c]``. Ids outside ``[0, V)`` raise
        ``DomainError`` (devices: at the next sync, after clamping; never an out-of-bounds
        read).

        Special values: rows are copied exactly, NaN, ``+-inf`` and ``-0.0`` included (the
        tolerance is exact; the reference does this). Zero ids or C = 0 give an empty
        result.

        Composite: primitives only (a one-hot ``compare`` times ``table`` by ``matmul``);
        being a product, it spreads a NaN or infinity of ``table`` to that column of every
        output row (``0 * NaN``), so the samples keep tables finite."""
        ...

    def embedding_backward(self, dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
        """``dtable[V, C]``: each row of ``dy[..., C]`` added into row ``ids[...]``; repeated
        ids accumulate; deterministic (same bits every run); ids as for ``embedding``.

        ``dtable[v, c] = sum of dy[i..., c] over every i with ids[i...] == v`` (0 for an id
        that never occurs), in a fixed order: no float atomics.

        Special values: IEEE sums: a NaN in a row of ``dy`` makes its id's row NaN, ``+inf``
        and ``-inf`` into one row make NaN; ``-0.0`` is 0.0. Zero ids give an all-zero
        ``dtable``; C = 0 an empty one.

        Composite: primitives only (a one-hot ``compare`` and a ``matmul``)."""
        ...


def check_ids(op: str, backend: Any, ids: Tensor, what: str, low: int, high: int) -> None:
    """Index dtype always; values in ``[low, high)`` at once when they live in host memory.

    On a device, reading the ids back would stall the queue on every step: there the
    kernels (or the composite's deferred flag) carry the check to the next sync point."""
    checks.index(op, ids, what)
    checks.supported(op, backend, ids.dtype)
    if ids.size and deferred.host_resident(ids):
        host(lambda t: _ids_in_range(op, what, low, high, t), ids)  # again on each replay


def _ids_in_range(op: str, what: str, low: int, high: int, ids: Tensor) -> None:
    values = ids.numpy()
    lo, hi = int(values.min()), int(values.max())
    if lo < low or hi >= high:
        raise DomainError(f"[{op}] {what} must lie in [{low}, {high}); got values in [{lo}, {hi}]")


def defer_range(op: str, ids: Tensor, like: Tensor, what: str, low: int, high: int) -> None:
    """The composite's device-side range check, read at the next sync point."""
    if not ids.size or deferred.host_resident(ids):
        return
    flat = cast(ids.contiguous().reshape(-1), like.dtype)
    n = flat.shape[0]
    lo = upload(like.backend, np.full(n, low - 0.5, like.dtype))
    hi = upload(like.backend, np.full(n, high - 0.5, like.dtype))
    bad = max(add(compare(flat, lo, "lt"), compare(flat, hi, "gt")))
    deferred.defer(bad, lambda: f"[{op}] {what} must lie in [{low}, {high}); some do not")


def embedding(table: Tensor, ids: Tensor) -> Tensor:
    checks.tensor("embedding", ids, "ids")
    backend = checks.float_operands("embedding", table)
    checks.same_backend("embedding", table, ids)
    checks.rank("embedding", table, 2, "table")
    check_ids("embedding", backend, ids, "ids", 0, table.shape[0])
    out = Out(ids.shape + (table.shape[1],), table.dtype)
    return dispatch(EMBEDDING, backend, (table, ids), out)


def embedding_backward(dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
    op = "embedding_backward"
    checks.tensor(op, ids, "ids")
    backend = checks.float_operands(op, dy)
    checks.same_backend(op, dy, ids)
    checks.index(op, ids, "ids")
    checks.min_rank(op, dy, 1, "dy")
    if dy.shape[:-1] != ids.shape:
        raise ShapeError(f"[{op}] dy {dy.shape} must be ids.shape {ids.shape} + (C,)")
    if not isinstance(num_embeddings, (int, np.integer)) or num_embeddings <= 0:
        raise ShapeError(f"[{op}] num_embeddings must be a positive int; got {num_embeddings!r}")
    v = int(num_embeddings)
    out = Out((v, dy.shape[-1]), dy.dtype)
    nbytes = v * dy.shape[-1] * dy.dtype.itemsize
    if nbytes > sys.maxsize:  # numpy says ValueError, a device something else: say it here
        raise OutOfMemoryError(
            f"[{op}] num_embeddings {v:,} x {dy.shape[-1]} {dy.dtype.name} needs {nbytes:,} "
            "bytes, more than any address space holds"
        )
    check_ids(op, backend, ids, "ids", 0, v)
    return dispatch(EMBEDDING_BACKWARD, backend, (dy, ids, v), out)


# -- composites ------------------------------------------------------------------------------------
def one_hot(ids: Tensor, num: int, like: Tensor) -> Tensor:
    """``[N, num]`` mask in ``like.dtype`` with a 1 at each id (none for an id outside)."""
    flat = cast(ids.contiguous().reshape(-1), like.dtype)  # a view may not reshape
    n = flat.shape[0]
    cols = upload(like.backend, np.arange(num, dtype=like.dtype)).reshape(1, num)
    return compare(flat.reshape(n, 1).broadcast_to((n, num)), cols.broadcast_to((n, num)), "eq")


def embedding_composite(table: Tensor, ids: Tensor) -> Tensor:
    v, c = table.shape
    defer_range("embedding", ids, table, "ids", 0, v)
    return matmul(one_hot(ids, v, table), table).reshape(ids.shape + (c,))


def embedding_backward_composite(dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
    c = dy.shape[-1]
    defer_range("embedding_backward", ids, dy, "ids", 0, num_embeddings)
    onehot = one_hot(ids, num_embeddings, dy)
    return matmul(onehot, dy.contiguous().reshape(ids.size, c), transpose_a=True)


def _embedding_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    table, ids = args
    return (embedding_backward(g, ids, table.shape[0]),)


def _scatter_scale(ex: Example) -> float:
    """Repeated ids accumulate: error grows with the most frequent id's count."""
    dy, ids = ex.args[0].value, ex.args[1].value
    count = int(np.bincount(ids.reshape(-1)).max()) if ids.size else 1
    return float(np.max([1.0, count * float(np.sqrt(np.mean(dy * dy))) if dy.size else 1.0]))


def _cost(args: list[Any]) -> tuple[int, int]:
    ids = args[1]
    c = args[0].shape[-1]
    return (2 * ids.size * c * args[0].dtype.itemsize + ids.nbytes, 0)


EMBEDDING = OpUnit(
    "embedding", "fused", EmbeddingMethods.embedding, module="embedding", function=embedding,
    composite=embedding_composite, vjp=_embedding_vjp, differentiable=(0,),
    nan="copies rows exactly (the composite spreads a NaN down its column)",
    tolerance=EXACT_TOLERANCES,
    cost=_cost,
    testing=_SAMPLES,
)  # fmt: skip
EMBEDDING_BACKWARD = OpUnit(
    "embedding_backward", "fused", EmbeddingMethods.embedding_backward, module="embedding",
    function=embedding_backward, composite=embedding_backward_composite, deterministic=True,
    tolerance=Tolerances(Tolerance(1e-6, 1e-5), Tolerance(1e-14, 1e-12), scale=_scatter_scale,
                         why="repeated ids accumulate in a backend-chosen (fixed) order"),
    cost=_cost,
    testing=_SAMPLES,
)  # fmt: skip

register(EMBEDDING, EMBEDDING_BACKWARD)
