"""One conformance outcome per case, in a shape both the table and the JSON report use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Statuses that make the run fail. ``xpass`` joins them under ``--strict``.
FAILING = frozenset({"fail", "error"})


@dataclass
class CaseResult:
    case_id: str
    op: str
    group: str  # "numeric", "protocol", "errors", "model"
    dtype: str = "-"
    mode: str = "-"  # "primitive", "native", "composite"
    status: str = "pass"  # pass | fail | error | skip | xfail | xpass
    reason: str = ""  # why it failed, was skipped or is expected to fail
    tolerance: dict[str, float] | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    max_ratio: float | None = None  # worst error / allowed error (<= 1 passes)
    examples: int = 0
    time_s: float = 0.0
    example: str = ""  # the failing example (label, shapes, flags)
    details: list[dict[str, Any]] = field(default_factory=list)

    def failed(self, strict: bool = False) -> bool:
        return self.status in FAILING or (strict and self.status == "xpass")

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.case_id,
            "op": self.op,
            "group": self.group,
            "dtype": self.dtype,
            "mode": self.mode,
            "status": self.status,
            "reason": self.reason,
            "tolerance": self.tolerance,
            "max_abs_err": self.max_abs,
            "max_rel_err": self.max_rel,
            "err_ratio": self.max_ratio,
            "examples": self.examples,
            "time_s": round(self.time_s, 4),
            "failing_example": self.example,
            "details": self.details,
        }
