"""What the float16 / bfloat16 kernel tests share: their backends, made once per process,
core's widened path done by hand, and a distance in units of a half's last place.

``ieee``: OpenCL as IEEE C at group size 256; ``fast96``: OpenCL built with fast math
(``-cl-fast-relaxed-math -cl-finite-math-only``, as Metal compiles) at group size 96, one
Metal picks; ``metal``: the Metal backend on its OpenCL stand-in (fast math, per-function
group sizes). A ``bits-`` prefix names the same backend; the tests then force half.h's
bit-level conversions into the programs they launch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_BACKENDS: dict[str, Any] = {}


def half_backend(kind: str) -> Any:
    """The backend ``kind`` names (see the module docstring)."""
    base = kind.removeprefix("bits-")
    if base not in _BACKENDS:
        from riftco.backends.opencl.backend import OpenCLBackend

        if base == "ieee":
            _BACKENDS[base] = OpenCLBackend(0, group_size=256, fast_math=False)
        elif base == "fast96":
            _BACKENDS[base] = OpenCLBackend(0, group_size=96, fast_math=True)
        elif base == "metal":
            from riftco.backends.metal import standin
            from riftco.backends.metal.backend import MetalBackend

            _BACKENDS[base] = MetalBackend(0, mc_module=standin)
        else:
            raise ValueError(f"unknown half test backend {kind!r}")
    return _BACKENDS[base]


def half_ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the half's last place, counted on the sign-magnitude
    ordered bit patterns (so across zero and the subnormals too); 0 where both are NaN,
    inf where only one is."""

    def ordered(a: np.ndarray) -> np.ndarray:
        b = a.view(np.uint16).astype(np.int64)
        return np.where(b & 0x8000, -(b & 0x7FFF), b)

    gn = np.isnan(got.astype(np.float32))
    wn = np.isnan(want.astype(np.float32))
    d = np.abs(ordered(got) - ordered(want)).astype(np.float64)
    d[gn & wn] = 0
    d[gn ^ wn] = np.inf
    return d


def widened(be: Any, name: str, *args: Any) -> list[np.ndarray]:
    """``be.<name>(*args)`` as core's widened path runs it: each half tensor operand cast to
    float32, the float32 method, each result cast back to the operands' half dtype and
    downloaded (for ops whose results are all in that dtype)."""
    from riftco.dtypes import LOW_PRECISION

    half = next(a.dtype for a in args if getattr(a, "dtype", None) in LOW_PRECISION)
    wide = [be.cast(a, np.float32) if getattr(a, "dtype", None) == half else a for a in args]
    outs = getattr(be, name)(*wide)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return [be.to_numpy(be.cast(o, half)) for o in outs]
