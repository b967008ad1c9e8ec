"""Embedding's launch plans (op unit ``riftco.ops.fused.embedding``; ``shaders/embedding.cl``).

The backward sums the rows of ``dy`` that share an id in one fixed order without float
atomics: a direct walk over every id for tiny problems, a stable radix sort of (id,
position) pairs and one ordered sum per segment otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .fused_plan import flat_threads
from .host import PlanBase
from .shader_defines import RADIX_BITS

if TYPE_CHECKING:
    from ..tensor import Tensor

#: Embedding backward walks every id per output element (one launch) while n * V is at
#: most this; above it, the sort/segment plan (O(n + V * C), six or more launches).
_EMBEDDING_DIRECT_MAX = 1 << 14
#: At most this many chunks (threads) per radix pass; each walks ceil(n / chunks) ids.
_RADIX_MAX_CHUNKS = 4096
_RADIX_MIN_CHUNK = 64


class EmbeddingPlan(PlanBase):
    """Row gather forward; deterministic scatter-add backward (see the module docstring).
    Ids out of range are clamped and flagged in the device status buffer."""

    def embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        v, c = table.shape
        n = ids.size
        out = self.empty(tuple(ids.shape) + (c,), table.dtype)
        if n and c:
            self.launch(
                "embedding", "embedding_forward", table.dtype, flat_threads(n * c),
                out, table, ids, ints=(n, c, v), index_dtype=ids.dtype,
                status=("embedding", v),
            )  # fmt: skip
        return out

    def embedding_backward(self, dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
        c = dy.shape[-1]
        n = ids.size
        v = int(num_embeddings)
        dtable = self.empty((v, c), dy.dtype)
        if v * c == 0:
            return dtable
        if n == 0:
            self.fill(dtable, 0.0)
            return dtable
        dt, it = dy.dtype, ids.dtype
        status = ("embedding_backward", v)
        if n * v <= _EMBEDDING_DIRECT_MAX:
            self.launch(
                "embedding", "embedding_backward", dt, flat_threads(v * c),
                dtable, dy, ids, ints=(n, c, v), index_dtype=it, status=status,
            )  # fmt: skip
            return dtable
        # Stable LSD radix sort of (id, position) pairs, then one ordered sum per segment.
        i32 = np.dtype(np.int32)
        chunk = max(_RADIX_MIN_CHUNK, -(-n // _RADIX_MAX_CHUNKS))
        chunks = -(-n // chunk)
        keys, pos = self.empty((n,), i32), self.empty((n,), i32)
        keys2, pos2 = self.empty((n,), i32), self.empty((n,), i32)
        counts = self.empty((chunks << RADIX_BITS,), i32)
        self.launch(
            "embedding", "embedding_sort_init", dt, flat_threads(n),
            keys, pos, ids, ints=(n, c, v), index_dtype=it, status=status,
        )  # fmt: skip
        for shift in range(0, v.bit_length(), RADIX_BITS):  # keys lie in [0, V]
            ints = (n, c, v, chunks, chunk, shift)
            self.launch("embedding", "radix_count", dt, chunks, counts, keys, ints=ints,
                        index_dtype=it)  # fmt: skip
            self.launch("embedding", "radix_scan", dt, 1, counts, ints=ints, index_dtype=it)
            self.launch(
                "embedding", "radix_scatter", dt, chunks,
                keys2, pos2, keys, pos, counts, ints=ints, index_dtype=it,
            )  # fmt: skip
            keys, pos, keys2, pos2 = keys2, pos2, keys, pos
        starts = self.empty((v + 1,), i32)
        self.launch("embedding", "embedding_segments", dt, flat_threads(v + 1), starts, keys,
                    ints=(n, c, v), index_dtype=it)  # fmt: skip
        self.launch(
            "embedding", "embedding_backward_rows", dt, flat_threads(v * c),
            dtable, dy, pos, starts, ints=(n, c, v), index_dtype=it,
        )  # fmt: skip
        return dtable
