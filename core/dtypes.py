"""The dtypes riftco knows: numpy dtype objects, so host code and backends agree for free."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DTypeError

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)

FLOAT_DTYPES = frozenset({float32, float64})
INDEX_DTYPES = frozenset({int32, int64})
ALL_DTYPES = FLOAT_DTYPES | INDEX_DTYPES

DType = np.dtype


def as_dtype(value: Any, op: str = "dtype") -> np.dtype:
    """Normalise ``"float32"``, ``np.float32`` or a dtype object; reject anything else
    (``None`` too: numpy would read it as float64, a silent choice riftco does not make)."""
    if value is None:
        raise DTypeError(f"[{op}] dtype None is not a dtype; name one (e.g. 'float32')")
    try:
        dt = np.dtype(value)
    except (TypeError, ValueError) as exc:
        raise DTypeError(f"[{op}] {value!r} is not a dtype") from exc
    if dt not in ALL_DTYPES:
        names = ", ".join(sorted(d.name for d in ALL_DTYPES))
        raise DTypeError(f"[{op}] dtype {dt.name} is not supported; expected one of {names}")
    return dt
