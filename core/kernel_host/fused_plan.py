"""Thread counts shared by the fused families' launch plans (``fused_*.py``).

Thread counts never assume a group size. Row-wise kernels loop over rows by threadgroup,
so any count works; these plans only aim to give each row (or tile block) a few hundred
threads whatever group size the runtime picks.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Cap on the threads asked for by grid-stride kernels; they loop over the rest.
MAX_THREADS = 1 << 21
#: Rows at least this long are reduced by a whole threadgroup, shorter ones by a team.
WHOLE_GROUP_COLS = 1024


def prod(shape: Sequence[int]) -> int:
    """The number of elements of ``shape`` (1 for ``()``)."""
    n = 1
    for s in shape:
        n *= int(s)
    return n


def flat_threads(n: int) -> int:
    """Threads for a grid-stride kernel over ``n`` items: at least 1, at most the cap."""
    return max(1, min(n, MAX_THREADS))


def row_plan(rows: int, cols: int) -> tuple[int, int]:
    """``(threads, team width)`` for a row-wise kernel.

    Short rows get a team of a power of two <= 32 threads (a SIMD-group or less: teams tile
    any group size Metal picks, and a group serves many rows per barrier); long rows get
    the whole group (the kernel clamps the width to the group size)."""
    if cols >= WHOLE_GROUP_COLS:
        return max(1, min(rows * 256, MAX_THREADS)), 1 << 30
    width = 1
    while width < 32 and width * 4 < cols:
        width *= 2
    return max(1, min(rows * width, MAX_THREADS)), width
