"""The dtypes riftco knows: numpy dtype objects, so host code and backends agree for free.

float16 is numpy's own. bfloat16 is ``ml_dtypes``' (the numpy extension JAX, TensorFlow and
ONNX share), imported only here and only when installed (``pip install 'riftco[bfloat16]'``):
without it ``bfloat16`` is ``None`` and naming it is a DTypeError that says what to install.
Its numpy ``kind`` is ``"V"``, not ``"f"``: ask :func:`is_float`, never ``dtype.kind``.

Low-precision operands compute in float32 and round once to their dtype
(``compute_dtype``; docs/DECISIONS.md, "Half precision").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DTypeError

float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)


def _bfloat16() -> np.dtype | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


bfloat16: np.dtype | None = _bfloat16()

LOW_PRECISION = frozenset(d for d in (float16, bfloat16) if d is not None)
FLOAT_DTYPES = frozenset({float32, float64}) | LOW_PRECISION
INDEX_DTYPES = frozenset({int32, int64})
ALL_DTYPES = FLOAT_DTYPES | INDEX_DTYPES

#: Unit roundoff (half an ulp at 1) of each float dtype: what one rounding may cost,
#: relative; the tolerances of low-precision results are derived from it.
UNIT_ROUNDOFF = {float16: 2.0**-11, float32: 2.0**-24, float64: 2.0**-53}
if bfloat16 is not None:
    UNIT_ROUNDOFF[bfloat16] = 2.0**-8

#: The spacing of each dtype's subnormals: a rounding's absolute error near zero.
SMALLEST_SUBNORMAL = {float16: 2.0**-24, float32: 2.0**-149, float64: 2.0**-1074}
if bfloat16 is not None:
    SMALLEST_SUBNORMAL[bfloat16] = 2.0**-133

DType = np.dtype


def is_float(dtype: Any) -> bool:
    """float16, bfloat16, float32 or float64 (bfloat16's numpy kind is "V")."""
    return dtype in FLOAT_DTYPES


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """What an op on ``dtype`` operands computes and accumulates in: float32 for the
    low-precision dtypes (rounded once to the output dtype), the dtype itself otherwise."""
    return float32 if dtype in LOW_PRECISION else dtype


def as_dtype(value: Any, op: str = "dtype") -> np.dtype:
    """Normalise ``"float32"``, ``np.float32`` or a dtype object; reject anything else
    (``None`` too: numpy would read it as float64, a silent choice riftco does not make)."""
    if value is None:
        raise DTypeError(f"[{op}] dtype None is not a dtype; name one (e.g. 'float32')")
    if bfloat16 is None and (value == "bfloat16" or getattr(value, "__name__", "") == "bfloat16"):
        raise DTypeError(
            f"[{op}] bfloat16 needs the ml_dtypes package (pip install 'riftco[bfloat16]')"
        )
    try:
        dt = np.dtype(value)
    except (TypeError, ValueError) as exc:
        raise DTypeError(f"[{op}] {value!r} is not a dtype") from exc
    if dt not in ALL_DTYPES:
        names = ", ".join(sorted(d.name for d in ALL_DTYPES))
        raise DTypeError(f"[{op}] dtype {dt.name} is not supported; expected one of {names}")
    return dt
