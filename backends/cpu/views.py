"""Numpy views of tensors on numpy-backed backends (cpu, native, anything built on them).

A leaf module: the cpu backend, its fused and optimizer mixins and the native backend all
read tensors through :func:`view`, and none of them needs the others to do so (it once
lived in ``backend.py``, which made ``backend.py`` and ``fused.py`` / ``optim.py`` import
each other).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided
from riftco.tensor import Tensor, dense_strides


def view(x: Tensor) -> np.ndarray:
    """The numpy view of a (possibly strided) tensor, without copying."""
    buf: np.ndarray = x.storage.buffer
    shape = x.shape
    if x.offset == 0 and buf.shape == shape and x.strides == (1,):  # a whole 1-D buffer
        return buf
    if x.offset == 0 and x.strides == dense_strides(shape) and buf.size == math.prod(shape):
        return buf.reshape(shape)
    item = buf.itemsize
    return as_strided(
        buf[x.offset :],
        shape=shape,
        strides=tuple(s * item for s in x.strides),
        writeable=False,
    )
