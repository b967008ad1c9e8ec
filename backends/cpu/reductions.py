"""Sums whose rounding error grows like log n, whatever axis they run over.

numpy sums a contiguous last axis pairwise, but along any other axis it adds one row
after another, so a float32 bias gradient over 10^6 rows drifts by ~4e-5 relative. Here
the reduced axes become one leading axis, and rows are added in halves until one row is
left: every input passes through about log2(n) additions (pairwise summation, Higham,
"Accuracy and Stability of Numerical Algorithms", section 4.2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from riftco.ieee import LOUD, quiet


def pairwise_sum(x: np.ndarray, axes: Sequence[int], keepdims: bool = False) -> np.ndarray:
    """``x`` summed over ``axes`` (non-negative, distinct), in ``x``'s own dtype."""
    axes = tuple(axes)
    kept = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if axes == tuple(range(x.ndim - len(axes), x.ndim)) and x.flags.c_contiguous:
        # trailing axes of a C-contiguous array: one contiguous run per result element,
        # which numpy itself sums pairwise
        n = math.prod([x.shape[a] for a in axes])
        rows = x.reshape((*kept, n))
        try:
            total = np.add.reduce(rows, axis=-1)
        except LOUD:  # IEEE: inf + -inf = NaN (see ``riftco.ieee``)
            with quiet():
                total = np.add.reduce(rows, axis=-1)
        if keepdims:
            total = total.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
        return np.asarray(total, dtype=x.dtype)
    n = math.prod([x.shape[a] for a in axes])
    rows = np.moveaxis(x, axes, tuple(range(len(axes)))).reshape((n, *kept))
    while len(rows) > 1:
        half = len(rows) // 2
        with quiet():  # IEEE: inf + -inf = NaN
            paired = rows[:half] + rows[half : 2 * half]
        rows = np.concatenate([paired, rows[2 * half :]]) if len(rows) % 2 else paired
    total = rows[0] if len(rows) else np.zeros(kept, dtype=x.dtype)
    if keepdims:
        total = total.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return np.asarray(total, dtype=x.dtype)
