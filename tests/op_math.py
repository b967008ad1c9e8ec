"""Independent scalar math shared by the CPU op tests (``test_cpu_ops*.py``).

Values come from Python ``math`` one element at a time, in float64, so they share no code
with the numpy backend they check.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import riftco

FLOATS = [np.float32, np.float64]
# float32 results of one rounded op compared with float64 math of the float32 inputs
TOL = {np.float32: dict(rtol=2e-6, atol=1e-7), np.float64: dict(rtol=1e-13, atol=1e-15)}


def t(a: object, dtype: object = None) -> riftco.Tensor:
    """A CPU tensor of ``a`` with numpy's dtype rules (``riftco.tensor`` narrows lists)."""
    return riftco.tensor(np.asarray(a, dtype=dtype))


def elementwise(fn: Callable[..., float], *arrays: np.ndarray) -> np.ndarray:
    """Apply a Python scalar function element by element, in float64."""
    flat = [np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays]
    out = [fn(*(float(f[i]) for f in flat)) for i in range(flat[0].size)]
    return np.array(out, dtype=np.float64).reshape(np.shape(arrays[0]))
