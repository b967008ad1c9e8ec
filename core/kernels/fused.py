"""Fused operations of every kernel backend: host-side launch plans over ``shaders/``.

``FusedKernels`` is a mixin for the kernel host layer (``KernelBackend``): it needs only
``self.empty(shape, dtype)``, ``self.fill(tensor, value)`` and ``self.launch(...)``.
Defining a method here makes that fused op native on every kernel backend (OpenCL, Metal,
and any runtime added later). Every launch is asynchronous: no method reads a result back.

Thread counts never assume a group size. Row-wise kernels loop over rows by threadgroup,
so any count works; the counts below only aim to give each row (or tile block) a few
hundred threads whatever group size the runtime picks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ShapeError
from ..ops.fused.attention_qkv import heads_view

if TYPE_CHECKING:
    from ..tensor import Tensor

#: Largest head dim the flash kernels' threadgroup tiles hold (shaders/flash_attention.cl).
FLASH_MAX_HEAD_DIM = 128
#: Query rows per flash block (float; double uses half): mirrors FA_BQ / FB_BR in the shader.
_FLASH_ROWS = 16
#: Rows per thread of the CPU-shaped flash kernels: mirrors FC_R in flash_attention_cpu.cl.
_FLASH_CPU_ROWS = 2
#: Cap on the threads asked for by grid-stride kernels; they loop over the rest.
_MAX_THREADS = 1 << 21
#: Rows at least this long are reduced by a whole threadgroup, shorter ones by a team.
_WHOLE_GROUP_COLS = 1024
#: Rows per chunk in the first stage of LayerNorm's dgamma/dbeta reduction.
_LN_CHUNK_ROWS = 64
#: Embedding backward walks every id per output element (one launch) while n * V is at
#: most this; above it, the sort/segment plan (O(n + V * C), six or more launches).
_EMBEDDING_DIRECT_MAX = 1 << 14
#: Digit width of the embedding backward's radix sort (RADIX_BITS in shaders/embedding.cl).
_RADIX_BITS = 8
#: At most this many chunks (threads) per radix pass; each walks ceil(n / chunks) ids.
_RADIX_MAX_CHUNKS = 4096
_RADIX_MIN_CHUNK = 64

_GELU_FORMS = {"tanh": 0, "none": 1}


def _prod(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _flat_threads(n: int) -> int:
    return max(1, min(n, _MAX_THREADS))


def _row_plan(rows: int, cols: int) -> tuple[int, int]:
    """``(threads, team width)`` for a row-wise kernel.

    Short rows get a team of a power of two <= 32 threads (a SIMD-group or less: teams tile
    any group size Metal picks, and a group serves many rows per barrier); long rows get
    the whole group (the kernel clamps the width to the group size)."""
    if cols >= _WHOLE_GROUP_COLS:
        return max(1, min(rows * 256, _MAX_THREADS)), 1 << 30
    width = 1
    while width < 32 and width * 4 < cols:
        width *= 2
    return max(1, min(rows * width, _MAX_THREADS)), width


class FusedKernels:
    """Native fused ops for kernel backends (semantics: each op unit in ``riftco.ops.fused``)."""

    empty: Any
    fill: Any
    launch: Any
    sum: Any

    # -- GELU ----------------------------------------------------------------------------
    def gelu(self, x: Tensor, approximate: str) -> Tensor:
        y = self.empty(x.shape, x.dtype)
        n = x.size
        if n and approximate == "tanh":  # one thread per element: vectorises on CPUs
            self.launch("gelu", "gelu_tanh_forward", x.dtype, n, y, x, ints=(n, 0))
        elif n:
            form = _GELU_FORMS[approximate]
            self.launch("gelu", "gelu_forward", x.dtype, _flat_threads(n), y, x, ints=(n, form))
        return y

    def gelu_backward(self, dy: Tensor, x: Tensor, approximate: str) -> Tensor:
        dx = self.empty(x.shape, x.dtype)
        n = x.size
        if n and approximate == "tanh":
            self.launch("gelu", "gelu_tanh_backward", x.dtype, n, dx, dy, x, ints=(n, 0))
        elif n:
            form = _GELU_FORMS[approximate]
            threads = _flat_threads(n)
            self.launch("gelu", "gelu_backward", x.dtype, threads, dx, dy, x, ints=(n, form))
        return dx

    # -- softmax -------------------------------------------------------------------------
    def softmax(self, x: Tensor) -> Tensor:
        y = self.empty(x.shape, x.dtype)
        cols = x.shape[-1]
        rows = x.size // cols if cols else 0
        if x.size:
            threads, width = _row_plan(rows, cols)
            ints = (rows, cols, width)
            self.launch("softmax", "softmax_forward", x.dtype, threads, y, x, ints=ints)
        return y

    def softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        dx = self.empty(y.shape, y.dtype)
        cols = y.shape[-1]
        rows = y.size // cols if cols else 0
        if y.size:
            threads, width = _row_plan(rows, cols)
            ints = (rows, cols, width)
            self.launch("softmax", "softmax_backward", y.dtype, threads, dx, dy, y, ints=ints)
        return dx

    # -- LayerNorm -----------------------------------------------------------------------
    def layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        c = x.shape[-1]
        lead = tuple(x.shape[:-1])
        rows = _prod(lead)
        y = self.empty(x.shape, x.dtype)
        mean = self.empty(lead, x.dtype)
        rstd = self.empty(lead, x.dtype)
        if rows and not c:  # core rejects C = 0; called directly, the statistics are NaN
            self.fill(mean, math.nan)
            self.fill(rstd, math.nan)
        if x.size:
            threads, width = _row_plan(rows, c)
            self.launch(
                "layernorm", "layer_norm_forward", x.dtype, threads,
                y, mean, rstd, x, gamma, beta, ints=(rows, c, width), floats=(eps,),
            )  # fmt: skip
        return y, mean, rstd

    def layer_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        c = x.shape[-1]
        rows = _prod(x.shape[:-1])
        dt = x.dtype
        dx = self.empty(x.shape, dt)
        dgamma = self.empty((c,), dt)
        dbeta = self.empty((c,), dt)
        if c == 0:
            return dx, dgamma, dbeta
        if rows == 0:
            self.fill(dgamma, 0.0)
            self.fill(dbeta, 0.0)
            return dx, dgamma, dbeta
        threads, width = _row_plan(rows, c)
        self.launch(
            "layernorm", "layer_norm_backward_dx", dt, threads,
            dx, dy, x, gamma, mean, rstd, ints=(rows, c, width),
        )  # fmt: skip
        # dgamma/dbeta without atomics: per-chunk column sums, then a sum over chunks.
        chunks = -(-rows // _LN_CHUNK_ROWS)
        partial = self.empty((chunks, 2, c), dt)
        pints = (rows, c, _LN_CHUNK_ROWS, chunks)
        self.launch(
            "layernorm", "layer_norm_backward_partial", dt, _flat_threads(chunks * c),
            partial, dy, x, mean, rstd, ints=pints,
        )  # fmt: skip
        self.launch(
            "layernorm", "layer_norm_backward_params", dt, _flat_threads(c),
            dgamma, dbeta, partial, ints=pints,
        )  # fmt: skip
        return dx, dgamma, dbeta

    # -- embedding -----------------------------------------------------------------------
    def embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        v, c = table.shape
        n = ids.size
        out = self.empty(tuple(ids.shape) + (c,), table.dtype)
        if n and c:
            self.launch(
                "embedding", "embedding_forward", table.dtype, _flat_threads(n * c),
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
                "embedding", "embedding_backward", dt, _flat_threads(v * c),
                dtable, dy, ids, ints=(n, c, v), index_dtype=it, status=status,
            )  # fmt: skip
            return dtable
        # Stable LSD radix sort of (id, position) pairs, then one ordered sum per segment.
        i32 = np.dtype(np.int32)
        chunk = max(_RADIX_MIN_CHUNK, -(-n // _RADIX_MAX_CHUNKS))
        chunks = -(-n // chunk)
        keys, pos = self.empty((n,), i32), self.empty((n,), i32)
        keys2, pos2 = self.empty((n,), i32), self.empty((n,), i32)
        counts = self.empty((chunks << _RADIX_BITS,), i32)
        self.launch(
            "embedding", "embedding_sort_init", dt, _flat_threads(n),
            keys, pos, ids, ints=(n, c, v), index_dtype=it, status=status,
        )  # fmt: skip
        for shift in range(0, v.bit_length(), _RADIX_BITS):  # keys lie in [0, V]
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
        self.launch("embedding", "embedding_segments", dt, _flat_threads(v + 1), starts, keys,
                    ints=(n, c, v), index_dtype=it)  # fmt: skip
        self.launch(
            "embedding", "embedding_backward_rows", dt, _flat_threads(v * c),
            dtable, dy, pos, starts, ints=(n, c, v), index_dtype=it,
        )  # fmt: skip
        return dtable

    # -- linear ----------------------------------------------------------------------------
    def linear(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """The product, then the bias added in place: two launches, no broadcast copy."""
        y: Tensor = self.matmul(x, weight, False, False)
        if y.size:
            self.launch("elementwise", "add_row_bias", y.dtype, y.size, y, bias,
                        ints=(y.size, y.shape[1]))  # fmt: skip
        return y

    def linear_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        dx: Tensor = self.matmul(dy, weight, False, True)
        dw: Tensor = self.matmul(x, dy, True, False)
        db: Tensor = self.sum(dy, (0,), False)
        return dx, dw, db

    # -- cross-entropy -------------------------------------------------------------------
    def cross_entropy(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        n, v = logits.shape
        loss = self.empty((n,), logits.dtype)
        lse = self.empty((n,), logits.dtype)
        if n and v:
            threads, width = _row_plan(n, v)
            self.launch(
                "cross_entropy", "cross_entropy_forward", logits.dtype, threads,
                loss, lse, logits, targets, ints=(n, v, width), index_dtype=targets.dtype,
                status=("cross_entropy", v),
            )  # fmt: skip
        return loss, lse

    def cross_entropy_backward(
        self, dloss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
    ) -> Tensor:
        n, v = logits.shape
        dlogits = self.empty((n, v), logits.dtype)
        if n and v:
            self.launch(
                "cross_entropy", "cross_entropy_backward", logits.dtype, _flat_threads(n * v),
                dlogits, dloss, logits, targets, lse, ints=(n, v), index_dtype=targets.dtype,
                status=("cross_entropy_backward", v),
            )  # fmt: skip
        return dlogits

    # -- materialised attention ------------------------------------------------------------
    # The products go through the backend's own matmul; row kernels fuse what lies between.
    matmul: Any

    def attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        b, h, t, d = q.shape
        if b * h * t == 0:
            return self.empty(q.shape, q.dtype), self.empty((b, h, t, t), q.dtype)
        # D = 0 (core rejects it) still runs: scores are 0, probs uniform over visible keys.
        probs = self.matmul(q, k, False, True)  # q k^T, scaled and masked in place below
        rows = b * h * t
        threads, width = _row_plan(rows, t)
        self.launch(
            "attention", "attention_softmax", q.dtype, threads,
            probs, ints=(rows, t, width, int(causal)), floats=(scale,),
        )  # fmt: skip
        return self.matmul(probs, v, False, False), probs

    def attention_backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        b, h, t, d = q.shape
        if q.size == 0:
            return (
                self.empty(q.shape, q.dtype),
                self.empty(q.shape, q.dtype),
                self.empty(q.shape, q.dtype),
            )
        dv = self.matmul(probs, dout, True, False)  # P^T dO
        ds = self.matmul(dout, v, False, True)  # dP = dO V^T, turned into scale * dS in place
        rows = b * h * t
        threads, width = _row_plan(rows, t)
        self.launch(
            "attention", "attention_backward_ds", q.dtype, threads,
            ds, probs, ints=(rows, t, width), floats=(scale,),
        )  # fmt: skip
        dq = self.matmul(ds, k, False, False)
        dk = self.matmul(ds, q, True, False)
        return dq, dk, dv

    # -- flash attention -----------------------------------------------------------------
    def _flash_check(self, op: str, q: Tensor) -> None:
        d = q.shape[-1]
        if d > FLASH_MAX_HEAD_DIM:
            raise ShapeError(
                f"[{op}] head dim D={d} (q shape {tuple(q.shape)}) exceeds the flash kernels' "
                f"limit of {FLASH_MAX_HEAD_DIM}; use attention(..., mode='materialized') or "
                f"split heads so that D <= {FLASH_MAX_HEAD_DIM}"
            )

    def _flash_rows(self) -> bool:
        """CPU devices (PoCL) take the barrier-free few-rows-per-thread kernels of
        ``shaders/flash_attention_cpu.cl``; GPUs and Metal the tiled ones."""
        return bool(getattr(getattr(self, "runtime", None), "is_cpu", False))

    def _flash_cpu_threads(self, bh: int, t: int) -> int:
        return _flat_threads(bh * -(-t // _FLASH_CPU_ROWS))

    def _flash_threads(self, bh: int, t: int) -> int:
        blocks = bh * -(-t // _FLASH_ROWS)
        return max(1, min(blocks * 256, _MAX_THREADS))

    def flash_attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        self._flash_check("flash_attention", q)
        b, h, t, d = q.shape
        out = self.empty(q.shape, q.dtype)
        lse = self.empty((b, h, t), q.dtype)
        if b * h * t == 0:  # D = 0 runs: lse = log(number of visible keys)
            return out, lse
        ints = (b * h, t, d, int(causal), *_dense_rows(t, d))
        self._flash_forward(out, lse, q, k, v, ints, scale)
        return out, lse

    def _flash_forward(
        self, out: Tensor, lse: Tensor, q: Tensor, k: Tensor, v: Tensor, ints: Any, scale: float
    ) -> None:
        bh, t, dt = ints[0], ints[1], q.dtype
        if self._flash_rows():
            self.launch(
                "flash_attention_cpu", "flash_forward_rows", dt, self._flash_cpu_threads(bh, t),
                out, lse, q, k, v, ints=ints, floats=(scale,),
            )  # fmt: skip
            return
        # Float tiles hold 16 query rows; double tiles 8 (more, smaller blocks: same math).
        threads = self._flash_threads(bh, t) * (2 if dt == np.float64 else 1)
        self.launch(
            "flash_attention", "flash_forward", dt, min(threads, _MAX_THREADS),
            out, lse, q, k, v, ints=ints, floats=(scale,),
        )  # fmt: skip

    def flash_attention_backward(
        self,
        dout: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        lse: Tensor,
        scale: float,
        causal: bool,
    ) -> tuple[Tensor, Tensor, Tensor]:
        self._flash_check("flash_attention_backward", q)
        b, h, t, d = q.shape
        dq = self.empty(q.shape, q.dtype)
        dk = self.empty(q.shape, q.dtype)
        dv = self.empty(q.shape, q.dtype)
        if q.size == 0:
            return dq, dk, dv
        ints = (b * h, t, d, int(causal), *_dense_rows(t, d))
        self._flash_backward((dq, dk, dv), dout, q, k, v, out, lse, ints, scale)
        return dq, dk, dv

    def _flash_backward(
        self,
        grads: tuple[Tensor, Tensor, Tensor],
        dout: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        lse: Tensor,
        ints: Any,
        scale: float,
    ) -> None:
        bh, t, dt = ints[0], ints[1], q.dtype
        dq, dk, dv = grads
        drow = self.empty((bh, t), dt)  # rowsum(dO * O): [BH, T], never [T, T]
        self.launch(
            "flash_attention", "flash_backward_rowdot", dt, _flat_threads(bh * t),
            drow, dout, out, ints=ints,
        )  # fmt: skip
        if self._flash_rows():  # barrier-free row kernels for CPU-class devices
            family, suffix, threads = "flash_attention_cpu", "_rows", self._flash_cpu_threads(bh, t)
        else:
            family, suffix = "flash_attention", ""
            threads = min(self._flash_threads(bh, t) * (2 if dt == np.float64 else 1), _MAX_THREADS)
        for kernel, outs in (("flash_backward_dkdv", (dk, dv)), ("flash_backward_dq", (dq,))):
            self.launch(
                family, kernel + suffix, dt, threads,
                *outs, q, k, v, dout, lse, drow, ints=ints, floats=(scale,),
            )  # fmt: skip

    # -- attention read from a fused q | k | v projection ----------------------------------
    # q, k and v are read as strided head blocks of qkv, and the output (forward) or
    # dq | dk | dv (backward) written straight into head blocks of theirs, so no split,
    # merge or concatenation copy runs. Materialised: the products take (batch, head)
    # strides (3 launches forward, 5 backward, where copies around ``attention`` take 7 and
    # 13); flash: the flash kernels take the row layouts (1 and 3 launches, were 5 and 12).
    product: Any

    def attention_qkv(
        self, qkv: Tensor, heads: int, scale: float, causal: bool, flash: bool
    ) -> tuple[Tensor, Tensor]:
        b, t, width = qkv.shape
        c = width // 3
        q, k, v = (heads_view(qkv, heads, i, 3) for i in range(3))
        out = self.empty((b, t, c), qkv.dtype)
        if flash:
            self._flash_check("attention_qkv", q)
            lse = self.empty((b, heads, t), qkv.dtype)
            if b * t:
                ints = (b * heads, t, c // heads, int(causal), *_qkv_rows(t, c, heads))
                self._flash_forward(out, lse, qkv, qkv, qkv, ints, scale)
            return out, lse
        probs = self.empty((b, heads, t, t), qkv.dtype)
        if b * t == 0:
            return out, probs
        self.product(probs, q, k, False, True)  # q k^T, scaled and masked in place below
        rows = b * heads * t
        threads, team = _row_plan(rows, t)
        self.launch(
            "attention", "attention_softmax", qkv.dtype, threads,
            probs, ints=(rows, t, team, int(causal)), floats=(scale,),
        )  # fmt: skip
        self.product(heads_view(out, heads), probs, v, False, False)
        return out, probs

    def attention_qkv_backward(
        self,
        dout: Tensor,
        qkv: Tensor,
        out: Tensor,
        stat: Tensor,
        heads: int,
        scale: float,
        causal: bool,
        flash: bool,
    ) -> Tensor:
        b, t, width = qkv.shape
        dt = qkv.dtype
        q, k, v = (heads_view(qkv, heads, i, 3) for i in range(3))
        dqkv = self.empty(qkv.shape, dt)
        if flash:
            self._flash_check("attention_qkv_backward", q)
            if qkv.size:
                c = width // 3
                ints = (b * heads, t, c // heads, int(causal), *_qkv_rows(t, c, heads))
                self._flash_backward((dqkv,) * 3, dout, qkv, qkv, qkv, out, stat, ints, scale)
            return dqkv
        if qkv.size == 0:
            return dqkv
        dq, dk, dv = (heads_view(dqkv, heads, i, 3) for i in range(3))
        do = heads_view(dout, heads)
        self.product(dv, stat, do, True, False)  # P^T dO
        ds = self.empty((b, heads, t, t), dt)
        self.product(ds, do, v, False, True)  # dP = dO V^T, turned into scale * dS in place
        rows = b * heads * t
        threads, team = _row_plan(rows, t)
        self.launch(
            "attention", "attention_backward_ds", dt, threads,
            ds, stat, ints=(rows, t, team), floats=(scale,),
        )  # fmt: skip
        self.product(dq, ds, k, False, False)
        self.product(dk, ds, q, True, False)
        return dqkv


def _dense_rows(t: int, d: int) -> tuple[int, ...]:
    """The flash kernels' row layouts (P[4:15], shaders/flash_attention.cl) for dense
    [BH, T, D] q, k, v, out: one head per batch index, rows D apart, no offsets."""
    return (1, t * d, 0, d, 0, 0, 0, t * d, 0, d, 0)


def _qkv_rows(t: int, c: int, heads: int) -> tuple[int, ...]:
    """The flash kernels' row layouts for head blocks of a dense ``qkv[B, T, 3C]`` (q, k,
    v at column offsets 0, C, 2C; head h at h * D) and of ``out[B, T, C]``."""
    d = c // heads
    return (heads, t * 3 * c, d, 3 * c, 0, c, 2 * c, t * c, d, c, 0)
