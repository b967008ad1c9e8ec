"""Element-wise comparison of a backend's output with the float64 reference.

Shared by the conformance suite and shadow validation. The numbers a failure reports are
the ones a backend author needs to find the bug: how many elements are off, the largest
absolute and relative error, and the index and values of the worst element (worst
relative to its own tolerance). The reference is first rounded to the output's dtype, so
a float32 result that overflows to inf where the exact value exceeds float32's range is
right, and one that stays finite is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import LOW_PRECISION, is_float
from .opunit import Tolerance

_SPECIAL = "NaN/Inf mismatches (NaN or infinity in one of got and expected, not both alike)"


@dataclass
class Comparison:
    """The outcome of comparing one output array."""

    name: str
    shape: tuple[int, ...]
    mismatches: int
    max_abs: float
    max_rel: float
    worst_index: tuple[int, ...] | None = None
    got: float | None = None
    expected: float | None = None
    problem: str = ""  # shape/dtype/NaN-pattern problems that make numbers meaningless
    #: the largest error / allowed error over the finite elements (<= 1 passes; inf when a
    #: NaN or infinity is misplaced): how close a passing output came to its tolerance
    max_ratio: float = 0.0
    #: mismatches where got or expected is NaN or infinite and the other differs (NaN vs a
    #: number, inf vs -inf): no error number describes them, so the message names them apart
    special: int = 0

    @property
    def ok(self) -> bool:
        return self.mismatches == 0 and not self.problem

    def describe(self) -> str:
        if self.problem:
            return f"{self.name}: {self.problem}"
        where = f"{self.name}[{', '.join(map(str, self.worst_index or ()))}]"
        total = int(np.prod(self.shape))
        numeric = self.mismatches - self.special
        errors = f"max abs err {self.max_abs:.3g}, max rel err {self.max_rel:.3g}"
        if not self.special:
            what = f"{self.mismatches} of {total} elements beyond tolerance; {errors}"
        elif not numeric:
            what = f"{self.special} of {total} elements are {_SPECIAL}"
        else:
            what = (f"{self.mismatches} of {total} elements wrong: {self.special} {_SPECIAL}, "
                    f"{numeric} beyond tolerance ({errors})")  # fmt: skip
        worst = f"worst at {where}: got {self.got!r}, expected {self.expected!r}"
        return f"{self.name}: {what}; {worst}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "output": self.name,
            "shape": list(self.shape),
            "mismatches": self.mismatches,
            "max_abs_err": self.max_abs,
            "max_rel_err": self.max_rel,
            "worst_index": list(self.worst_index) if self.worst_index is not None else None,
            "got": self.got,
            "expected": self.expected,
            "problem": self.problem,
            "max_ratio": self.max_ratio,
            "nan_inf_mismatches": self.special,
        }


def _unusable(name: str, expected: np.ndarray, problem: str) -> Comparison:
    """A result whose numbers cannot be compared at all: every element counts as wrong."""
    return Comparison(name, expected.shape, -1, np.inf, np.inf, problem=problem, max_ratio=np.inf)


def compare(
    name: str, got: np.ndarray, expected: np.ndarray, tol: Tolerance, atol_scale: float = 1.0
) -> Comparison:
    """Compare ``got`` (any dtype) with ``expected`` (float64 or integer) under ``tol``.

    ``atol_scale`` is the input magnitude an accumulating op's error grows with (see
    ``Tolerances.scale``); the absolute tolerance is multiplied by it."""
    got = np.asarray(got)
    expected = np.asarray(expected)
    if got.shape != expected.shape:
        return _unusable(name, expected, f"shape {got.shape}, expected {expected.shape}")
    if expected.dtype.kind in "iu" and got.dtype.kind not in "iu":
        return _unusable(name, expected, f"dtype {got.dtype}, expected an integer dtype")
    g = got.astype(np.float64)
    with np.errstate(over="ignore"):
        rounded = expected.astype(got.dtype) if is_float(got.dtype) else expected
    e = rounded.astype(np.float64)
    # What is NaN or infinite is decided on the rounded value (a finite float64 beyond
    # float16's range is inf in float16); how far a finite low-precision result is, on the
    # unrounded one: a correctly rounded result is within u of it, while against the
    # rounded value one ulp of slack would hide a result rounded twice. (Exact ops, a
    # fill or a copy, are exact against the rounded value.)
    special = e
    exact = tol.atol == 0 and tol.rtol == 0
    if got.dtype in LOW_PRECISION and expected.dtype not in LOW_PRECISION and not exact:
        e = np.where(np.isfinite(e), expected.astype(np.float64), e)
    if g.size == 0:
        return Comparison(name, e.shape, 0, 0.0, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        nan_e, nan_g = np.isnan(special), np.isnan(g)
        inf_e = np.isinf(special)
        special_bad = (nan_e != nan_g) | (inf_e & (g != e)) | (~inf_e & ~nan_e & np.isinf(g))
        finite = ~(nan_e | nan_g | inf_e | np.isinf(g))
        diff = np.where(finite, np.abs(g - e), 0.0)
        scale = np.abs(e)
        rel = np.where(finite & (scale > 0), diff / np.where(scale > 0, scale, 1.0), 0.0)
        rel = np.where(finite & (scale == 0) & (diff > 0), np.inf, rel)
        allowed = tol.atol * atol_scale + tol.rtol * scale + tol.floor
        bad = special_bad | (finite & (diff > allowed))
        # error relative to each element's own allowance, so the worst is the most wrong
        used = np.where(finite, diff / np.maximum(allowed, 1e-300), 0.0)
        ratio = np.where(bad, np.where(finite, used, np.inf), 0.0)
    mismatches = int(np.count_nonzero(bad))
    comp = Comparison(name, e.shape, mismatches, float(diff.max()), float(rel.max()))
    comp.max_ratio = float(ratio.max()) if mismatches else float(used.max())
    comp.special = int(np.count_nonzero(special_bad))
    if mismatches:
        flat = int(np.argmax(ratio))
        idx = tuple(int(i) for i in np.unravel_index(flat, e.shape))
        comp.worst_index = idx
        comp.got = float(g[idx]) if g.ndim else float(g)
        comp.expected = float(e[idx]) if e.ndim else float(e)
    return comp
