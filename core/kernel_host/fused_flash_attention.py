"""Flash attention's launch plans (op unit ``riftco.ops.fused.flash_attention``).

Two kernel shapes compute the same thing: the tiled kernels of
``shaders/flash_attention.cl`` (GPUs, Metal) and the barrier-free few-rows-per-thread ones
of ``shaders/flash_attention_cpu.cl``, taken where the runtime's capabilities say
``is_cpu`` (PoCL). Both read each operand through a row layout (``FlashRows``), so the
fused-projection plans of ``fused_attention_qkv.py`` launch them too, through the module
functions here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from .fused_plan import MAX_THREADS, flat_threads
from .host import KernelHost, PlanBase
from .shader_defines import FLASH_BLOCK_ROWS, FLASH_CPU_ROWS, FLASH_MAX_HEAD_DIM, dense_rows

if TYPE_CHECKING:
    from ..tensor import Tensor

#: The flash kernels' integer parameters: ``(BH, T, D, causal, *FlashRows)``.
FlashInts = tuple[int, ...]


def flash_check(op: str, q: Tensor) -> None:
    """Refuse a head dim the kernels' tiles cannot hold, naming the way out."""
    d = q.shape[-1]
    if d > FLASH_MAX_HEAD_DIM:
        raise ShapeError(
            f"[{op}] head dim D={d} (q shape {tuple(q.shape)}) exceeds the flash kernels' "
            f"limit of {FLASH_MAX_HEAD_DIM}; use attention(..., mode='materialized') or "
            f"split heads so that D <= {FLASH_MAX_HEAD_DIM}"
        )


def _cpu_shaped(host: KernelHost) -> bool:
    """CPU devices (PoCL) take the barrier-free few-rows-per-thread kernels of
    ``shaders/flash_attention_cpu.cl``; GPUs and Metal the tiled ones."""
    return host.runtime.capabilities.is_cpu


def _cpu_threads(bh: int, t: int) -> int:
    return flat_threads(bh * -(-t // FLASH_CPU_ROWS))


def _tiled_threads(bh: int, t: int, dtype: np.dtype) -> int:
    """256 threads per block of ``FLASH_BLOCK_ROWS`` rows; double blocks hold half as many
    rows, so twice the blocks (more, smaller blocks: same math)."""
    blocks = bh * -(-t // FLASH_BLOCK_ROWS)
    threads = max(1, min(blocks * 256, MAX_THREADS))
    return min(threads * (2 if dtype == np.float64 else 1), MAX_THREADS)


def flash_forward(
    host: KernelHost,
    out: Tensor,
    lse: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    ints: FlashInts,
    scale: float,
) -> None:
    """Queue the forward: one launch writing ``out`` and ``lse``."""
    bh, t, dt = ints[0], ints[1], q.dtype
    if _cpu_shaped(host):
        host.launch(
            "flash_attention_cpu", "flash_forward_rows", dt, _cpu_threads(bh, t),
            out, lse, q, k, v, ints=ints, floats=(scale,),
        )  # fmt: skip
        return
    host.launch(
        "flash_attention", "flash_forward", dt, _tiled_threads(bh, t, dt),
        out, lse, q, k, v, ints=ints, floats=(scale,),
    )  # fmt: skip


def flash_backward(
    host: KernelHost,
    grads: tuple[Tensor, Tensor, Tensor],
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    ints: FlashInts,
    scale: float,
) -> None:
    """Queue the backward: rowsum(dO * O), then dk/dv and dq (three launches)."""
    bh, t, dt = ints[0], ints[1], q.dtype
    dq, dk, dv = grads
    drow = host.empty((bh, t), dt)  # rowsum(dO * O): [BH, T], never [T, T]
    host.launch(
        "flash_attention", "flash_backward_rowdot", dt, flat_threads(bh * t),
        drow, dout, out, ints=ints,
    )  # fmt: skip
    if _cpu_shaped(host):  # barrier-free row kernels for CPU-class devices
        family, suffix, threads = "flash_attention_cpu", "_rows", _cpu_threads(bh, t)
    else:
        family, suffix, threads = "flash_attention", "", _tiled_threads(bh, t, dt)
    for kernel, outs in (("flash_backward_dkdv", (dk, dv)), ("flash_backward_dq", (dq,))):
        host.launch(
            family, kernel + suffix, dt, threads,
            *outs, q, k, v, dout, lse, drow, ints=ints, floats=(scale,),
        )  # fmt: skip


class FlashAttentionPlan(PlanBase):
    """Flash attention on dense [B, H, T, D] operands: no [T, T] buffer anywhere."""

    def flash_attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        flash_check("flash_attention", q)
        b, h, t, d = q.shape
        out = self.empty(q.shape, q.dtype)
        lse = self.empty((b, h, t), q.dtype)
        if b * h * t == 0:  # D = 0 runs: lse = log(number of visible keys)
            return out, lse
        ints = (b * h, t, d, int(causal), *dense_rows(t, d))
        flash_forward(self, out, lse, q, k, v, ints, scale)
        return out, lse

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
        flash_check("flash_attention_backward", q)
        b, h, t, d = q.shape
        dq = self.empty(q.shape, q.dtype)
        dk = self.empty(q.shape, q.dtype)
        dv = self.empty(q.shape, q.dtype)
        if q.size == 0:
            return dq, dk, dv
        ints = (b * h, t, d, int(causal), *dense_rows(t, d))
        flash_backward(self, (dq, dk, dv), dout, q, k, v, out, lse, ints, scale)
        return dq, dk, dv
