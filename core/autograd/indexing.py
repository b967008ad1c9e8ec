"""Basic slicing as a graph op: a free view forward, a zero-padding scatter backward.

There is no strided-write primitive in the Backend protocol, so the VJP rebuilds the
base-shaped gradient axis by axis from primitives: it moves the axis last (a view), spaces
the values out for steps > 1 (concatenate with zero columns, then reshape), pads zeros
before and after (``concatenate_last_axis``) and moves the axis back. Each sliced axis
costs one or two concatenations; untouched axes cost nothing. Supported indices are what
``Tensor.__getitem__`` supports: ints, slices with positive step, ``...`` and ``None``.
"""

from __future__ import annotations

from typing import Any

from .. import ops
from ..ops import full_like
from ..tensor import Tensor
from .graph import Variable, make
from .operations import _reshape, pad_last_axis


def _axis_plan(shape: tuple[int, ...], index: Any) -> list[tuple[int, int, int]]:
    """``(start, step, count)`` per source axis; an int index is a count-1 slice."""
    if not isinstance(index, tuple):
        index = (index,)
    real = [i for i in index if i is not None and i is not Ellipsis]
    items: list[Any] = []
    for item in index:
        if item is Ellipsis:
            items.extend([slice(None)] * (len(shape) - len(real)))
        elif item is not None:
            items.append(item)
    items.extend([slice(None)] * (len(shape) - len(items)))
    plan = []
    for item, dim in zip(items, shape, strict=False):
        if isinstance(item, slice):
            start, stop, step = item.indices(dim)
            plan.append((start, step, max(0, (stop - start + step - 1) // step)))
        else:
            plan.append((int(item) % dim, 1, 1))
    return plan


def _scatter_last(g: Tensor, start: int, step: int, dim: int) -> Tensor:
    """Place ``g[..., j]`` at ``start + j*step`` of a zero last axis of size ``dim``."""
    lead, count = g.shape[:-1], g.shape[-1]
    if count == 0:
        return full_like(g, 0.0, lead + (dim,))
    if step > 1:
        col = _reshape(g, lead + (count, 1))
        spaced = ops.concatenate_last_axis([col, full_like(g, 0.0, lead + (count, step - 1))])
        g = spaced.reshape(lead + (count * step,))
        if count * step > dim - start:  # the trailing zeros past the end are dropped
            g = g[..., : dim - start]
    return pad_last_axis(g, start, dim - start - g.shape[-1])


def getitem(x: Variable, index: Any) -> Variable:
    xv = x._value
    y = xv[index]  # validates the index; a view, no kernel
    shape = xv.shape
    plan = _axis_plan(shape, index)

    def rule(g: Tensor) -> tuple[Tensor]:
        g = _reshape(g, tuple(count for _, _, count in plan))  # drop None axes, restore ints
        last = len(shape) - 1
        for axis, ((start, step, count), dim) in enumerate(zip(plan, shape, strict=False)):
            if (start, step, count) == (0, 1, dim):
                continue
            moved = g.transpose(axis, last) if axis != last else g
            moved = _scatter_last(moved, start, step, dim)
            g = moved.transpose(axis, last) if axis != last else moved
        return (g,)

    return make(y, "getitem", (x,), rule)
