"""Host-side shape arithmetic for kernels: collapsing views and planning reductions.

Kernels index with int32 and handle at most 8 dims; collapsing merges every run of dims
that is contiguous in memory, so most views reach ``copy_strided`` as rank 1-3.
"""

from __future__ import annotations

from collections.abc import Sequence


def collapse(shape: Sequence[int], strides: Sequence[int]) -> tuple[list[int], list[int]]:
    """Drop size-1 dims and merge dims whose memory is contiguous with the next one."""
    dims = [(d, s) for d, s in zip(shape, strides, strict=True) if d != 1]
    if not dims:
        return [1], [1]
    out_shape, out_strides = [dims[0][0]], [dims[0][1]]
    for d, s in dims[1:]:
        if out_strides[-1] == s * d:
            out_shape[-1] *= d
            out_strides[-1] = s
        else:
            out_shape.append(d)
            out_strides.append(s)
    return out_shape, out_strides


def reduction_groups(shape: Sequence[int], axes: Sequence[int]) -> list[tuple[int, bool]]:
    """Runs of (size, reduced?) after dropping size-1 dims and merging equal neighbours.

    A dense ``[2, 3, 4, 5]`` reduced over ``(2, 3)`` becomes ``[(6, False), (20, True)]``:
    a row reduction. ``[(R, True), (K, False)]`` is a column reduction; anything else needs
    a permuting copy first.
    """
    runs: list[tuple[int, bool]] = []
    reduced = set(axes)
    for i, d in enumerate(shape):
        if d == 1:
            continue
        flag = i in reduced
        if runs and runs[-1][1] == flag:
            runs[-1] = (runs[-1][0] * d, flag)
        else:
            runs.append((d, flag))
    return runs
