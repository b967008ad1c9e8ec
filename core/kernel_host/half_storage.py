"""float16 / bfloat16 in the kernel host: 2-byte storage, float32 compute (shaders/half.h).

Kernels hold a half as its 16 bits (``T = ushort``): the copy kernels move them as they
are, and every conversion names a function of ``half.h``. Float parameter buffers of a
half program hold the compute dtype, float32 (compute in float32, round once to the output
dtype: docs/DECISIONS.md, "Half precision"), so a constant such as a scale is not
rounded to half first.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import LOW_PRECISION, bfloat16, float16
from ..errors import DTypeError
from ..ieee import quiet

#: The half dtypes present here (bfloat16 needs ml_dtypes), with the name half.h gives each.
HALF_NAMES: dict[np.dtype, str] = {float16: "f16", **({bfloat16: "bf16"} if bfloat16 else {})}
#: The C type of a half in kernels: its bits.
STORAGE_C_TYPE = "ushort"
#: Families whose kernels declare tensors ``TS`` and compute in ``T`` (half.h): their half
#: programs get ``T = float`` and ``RIFTCO_STORAGE_F16`` / ``_BF16``. Every other family's
#: half programs hold a half as its bits (``T = ushort``) and only move it.
HALF_COMPUTE_FAMILIES = frozenset({"elementwise", "softmax", "layer_norm", "cross_entropy"})
#: The protocol ops whose kernels are in those families: a kernel backend runs them on
#: half storage itself (``low_precision_ops``); core widens the rest through float32.
HALF_NATIVE_OPS = frozenset(
    {"neg", "exp", "log", "sqrt", "rsqrt", "tanh", "abs", "add", "sub", "mul", "div",
     "maximum", "minimum", "compare", "where", "add_scalar", "mul_scalar", "pow_scalar",
     "softmax", "softmax_backward", "layer_norm", "layer_norm_backward", "add_layer_norm",
     "add_layer_norm_backward", "cross_entropy", "cross_entropy_backward"}
)  # fmt: skip
_WIDE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def is_half(dtype: np.dtype) -> bool:
    """True for float16 and bfloat16 (``dtype.kind`` cannot tell: bfloat16's is "V")."""
    return dtype in LOW_PRECISION


def half_bits(value: float, dtype: np.dtype) -> int:
    """``value`` rounded once (to nearest even, from the float64 value) to ``dtype``, as
    its 16 bits: what ``fill_bits`` writes."""
    with quiet():  # 1e9 as float16 is inf (IEEE), not news
        return int(np.asarray(value, dtype=dtype).reshape(1).view(np.uint16)[0])


def cast_defines(src: np.dtype, dst: np.dtype) -> dict[str, str]:
    """The cast.cl defines naming half.h's conversion between ``src`` and ``dst`` (one
    of them a half; the other a half, float32 or float64). Half to half goes through
    float32: exact, then one rounding."""
    for dt, other in ((src, dst), (dst, src)):
        if dt not in HALF_NAMES and dt not in _WIDE:
            raise DTypeError(
                f"[cast] no conversion between {src.name} and {other.name} on kernel "
                f"backends: {dt.name} <-> float16/bfloat16 goes through float32"
            )
    defines: dict[str, str] = {}
    if src in HALF_NAMES and src != dst:
        defines["CAST_WIDEN"] = f"riftco_{HALF_NAMES[src]}_to_{_WIDE.get(dst, 'float')}"
    if dst in HALF_NAMES and src != dst:
        defines["CAST_NARROW"] = f"riftco_{HALF_NAMES[dst]}_from_{_WIDE.get(src, 'float')}"
    return defines
