"""The one table of conformance tolerances, per op and per dtype.

A value passes when ``|got - expected| <= atol + rtol * |expected|`` element by element,
where ``expected`` is the CPU backend's float64 result on the very same (already rounded)
inputs. So the table measures only the backend's own arithmetic error, never input
rounding. Every entry looser than the default says why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    def __str__(self) -> str:
        return f"atol={self.atol:.0e} rtol={self.rtol:.0e}"

    def as_dict(self) -> dict[str, float]:
        return {"atol": self.atol, "rtol": self.rtol}


EXACT = Tolerance(0.0, 0.0)

#: Correctly rounded float32 results (add, mul, neg, abs, max, ...) are within 0.5 ulp.
_F32 = Tolerance(1e-6, 2e-6)
#: float64 backends other than the reference may fuse or reorder; allow a few ulps.
_F64 = Tolerance(1e-12, 1e-12)

# fmt: off
TOLERANCES: dict[str, dict[str, Tolerance]] = {
    "float32": {
        # exp/log/tanh/sqrt/rsqrt/pow: GPU math libraries guarantee a few ulp, not 0.5 ulp.
        "exp": Tolerance(1e-6, 1e-5), "log": Tolerance(1e-6, 1e-5),
        "tanh": Tolerance(1e-6, 1e-5), "sqrt": Tolerance(1e-6, 1e-5),
        "rsqrt": Tolerance(1e-6, 1e-5), "pow_scalar": Tolerance(1e-6, 1e-5),
        # OpenCL allows 2.5 ulp division unless built with -cl-fp32-correctly-rounded-divide-sqrt
        "div": Tolerance(1e-6, 1e-5),
        # sum and matmul accumulate n (or K) terms in a backend-chosen order (tiles, FMA,
        # pairwise or sequential): their atol is per unit of n * rms(terms) (OpSpec.magnitude),
        # ~25x the typical error of a plain sequential float32 sum.
        "sum": Tolerance(1e-6, 1e-5),
        "matmul": Tolerance(1e-6, 1e-5),
        # gelu: tanh/erf ulp error; "none" may use the A&S erf (|err| < 1.5e-7) of the composite.
        "gelu": Tolerance(2e-6, 1e-5),
        # gelu_backward: for large |x| it cancels (1 + tanh) and (1 - tanh^2), then scales
        # by x * dy, so a few ulp of tanh become ~1e-5 absolute (seen on PoCL, composite).
        "gelu_backward": Tolerance(2e-5, 2e-5),
        # softmax: exp ulp error plus a row sum of up to 4097 terms.
        "softmax": Tolerance(1e-6, 2e-5), "softmax_backward": Tolerance(1e-5, 1e-4),
        # layer_norm: mean/variance accumulate over the row (4097 wide), then rsqrt.
        "layer_norm": Tolerance(2e-5, 1e-4), "layer_norm_backward": Tolerance(1e-4, 1e-4),
        "embedding": _F32,
        # embedding_backward: repeated ids accumulate in a backend-chosen (fixed) order; atol
        # is per unit of (largest id count * rms(dy)), like sum.
        "embedding_backward": Tolerance(1e-6, 1e-5),
        # cross_entropy: log-sum-exp over the row; logits reach +-80 so lse has ulps of 80.
        "cross_entropy": Tolerance(2e-5, 2e-5), "cross_entropy_backward": Tolerance(1e-6, 1e-4),
        # attention: two accumulating matmuls around a softmax (and online rescaling for flash).
        "attention": Tolerance(1e-4, 1e-4), "attention_backward": Tolerance(2e-4, 2e-4),
        "flash_attention": Tolerance(1e-4, 1e-4), "flash_attention_backward": Tolerance(2e-4, 2e-4),
        # adam_update: sqrt and division by (sqrt(vhat) + eps) amplify ulps when vhat is tiny.
        "adam_update": Tolerance(1e-6, 1e-4),
    },
    "float64": {
        "sum": Tolerance(1e-14, 1e-12),  # accumulation order, per n * rms as for float32
        "matmul": Tolerance(1e-14, 1e-12),  # accumulation order, per K * rms as for float32
        # the composite GELU "none" uses A&S 7.1.26 erf (|err| < 1.5e-7) in every dtype.
        "gelu": Tolerance(1e-6, 1e-6), "gelu_backward": Tolerance(1e-6, 1e-6),
        # accumulating fused ops: the order of long sums differs between backends.
        "softmax": Tolerance(1e-12, 1e-10), "softmax_backward": Tolerance(1e-11, 1e-10),
        "layer_norm": Tolerance(1e-10, 1e-10), "layer_norm_backward": Tolerance(1e-10, 1e-10),
        "embedding_backward": Tolerance(1e-14, 1e-12),
        "cross_entropy": Tolerance(1e-10, 1e-11), "cross_entropy_backward": Tolerance(1e-11, 1e-10),
        "attention": Tolerance(1e-10, 1e-10), "attention_backward": Tolerance(1e-10, 1e-10),
        "flash_attention": Tolerance(1e-10, 1e-10),
        "flash_attention_backward": Tolerance(1e-10, 1e-10),
        "adam_update": Tolerance(1e-12, 1e-10),  # sqrt + division, as for float32
    },
}
# fmt: on

#: Results that are exact by definition: masks, indices, copies and casts.
EXACT_OPS = frozenset(
    {
        "compare",
        "where",
        "argmax",
        "cast",
        "abs",
        "neg",
        "maximum",
        "minimum",
        "max",
        "concatenate_last_axis",
        "split_last_axis",
        "copy_strided",
        "to_numpy",
        "from_numpy",
        "fill",
    }
)

_DEFAULTS = {"float32": _F32, "float64": _F64}


def tolerance(op: str, dtype: np.dtype | str) -> Tolerance:
    """The tolerance for ``op`` computed in ``dtype`` (see the table above)."""
    name = np.dtype(dtype).name
    if op in EXACT_OPS:
        return EXACT
    if name not in _DEFAULTS:  # integer results compare exactly
        return EXACT
    return TOLERANCES.get(name, {}).get(op, _DEFAULTS[name])
