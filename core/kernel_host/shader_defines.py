"""Numbers the host's launch plans and the shaders must agree on, defined once, here.

A launch plan sizes its threads and buffers from the same numbers a kernel sizes its tiles
and reads its parameters by: the flash kernels' head-dim limit and rows per block, the
radix sort's digit width, where the flash kernels find each row layout in ``P``. Kept by
hand in two languages they drift silently (a wrong thread count still runs, just over the
wrong rows), so :func:`shader_defines` turns these definitions into ``#define NAME value``
lines that ``sources.program_source`` puts into every program, and the shaders use the
macros without defining them (``tests/kernels/test_shader_defines.py`` fails if one does).
"""

from __future__ import annotations

from typing import Final, NamedTuple

#: Largest head dim the flash kernels hold (their threadgroup tiles and private rows are
#: sized by it); the host refuses larger D with a ShapeError.
FLASH_MAX_HEAD_DIM: Final = 128
#: Rows per flash block for float: query rows per forward block, rows owned by a backward
#: block. Double blocks take half (same math, half the threadgroup memory per row).
FLASH_BLOCK_ROWS: Final = 16
#: Rows per thread of the barrier-free flash kernels for CPU devices (flash_attention_cpu.cl).
FLASH_CPU_ROWS: Final = 2
#: Digit width of the embedding backward's radix sort (shaders/embedding.cl).
RADIX_BITS: Final = 8
#: Tensors one launch of ``adamw_multi`` (shaders/adam.cl) updates: four buffers each
#: plus the norm, ``P`` and ``F`` make 27 bound buffers, within Metal's 31.
ADAM_SEGMENTS: Final = 6
#: Index in the flash kernels' integer parameters ``P`` of the first row-layout field,
#: after ``[BH, T, D, causal]``.
FLASH_LAYOUT_AT: Final = 4


class FlashRows(NamedTuple):
    """Where the flash kernels find one head's rows: ``P[FLASH_LAYOUT_AT:]`` in this order
    (shaders/flash_rows.h reads each field at index ``FLASH_P_<FIELD>``).

    Row ``i`` of head ``bh = b * heads + h`` starts at ``offset + b * batch_stride + h *
    head_stride + i * row_stride``. The first seven fields describe q, k, v and their
    gradients (one set of strides, an offset each), the last four out and dout. Each
    batch, head and row stride triple must stay adjacent: ``fa_rows`` reads them in a row.
    """

    heads: int
    batch_stride: int
    head_stride: int
    row_stride: int
    q_offset: int
    k_offset: int
    v_offset: int
    out_batch_stride: int
    out_head_stride: int
    out_row_stride: int
    out_offset: int


def dense_rows(t: int, d: int) -> FlashRows:
    """Dense [BH, T, D] q, k, v, out: one head per batch index, rows D apart, no offsets."""
    return FlashRows(1, t * d, 0, d, 0, 0, 0, t * d, 0, d, 0)


def qkv_rows(t: int, c: int, heads: int) -> FlashRows:
    """Head blocks of a dense ``qkv[B, T, 3C]`` (q, k, v at column offsets 0, C, 2C; head
    h at h * D) and of ``out[B, T, C]``."""
    d = c // heads
    return FlashRows(heads, t * 3 * c, d, 3 * c, 0, c, 2 * c, t * c, d, c, 0)


def shader_defines() -> dict[str, int]:
    """Every name the shaders take from the host, with its value (all plain ints)."""
    defines = {
        "FLASH_MAX_HEAD_DIM": FLASH_MAX_HEAD_DIM,
        "FLASH_BLOCK_ROWS": FLASH_BLOCK_ROWS,
        "FLASH_CPU_ROWS": FLASH_CPU_ROWS,
        "RADIX_BITS": RADIX_BITS,
        "ADAM_SEGMENTS": ADAM_SEGMENTS,
    }
    for i, field in enumerate(FlashRows._fields):
        defines[f"FLASH_P_{field.upper()}"] = FLASH_LAYOUT_AT + i
    return defines
