"""Run numeric cases: edges first, then hypothesis-drawn examples, each against CPU float64.

Only the Backend protocol and ``riftco.ops`` are used, so any backend (in-tree, OpenCL,
Metal, third-party) runs the same suite. Hypothesis draws the parameters (shapes, flags,
layouts, a value seed); it is derandomised unless a seed is given, and never shrinks, so a
run takes a predictable time and a failure reports the first example that broke.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np
import riftco
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from riftco import composites

from .cases import Ctx, OpSpec
from .compare import Comparison, compare
from .inputs import Example, upload_args
from .results import CaseResult
from .tolerances import tolerance

#: Drawn examples per case on top of its edge cases: a full cpu run stays well under 60 s.
DEFAULT_MAX_EXAMPLES = 25


@dataclass(frozen=True)
class RunSettings:
    max_examples: int = DEFAULT_MAX_EXAMPLES
    seed: int | None = None  # None: derandomised (the same examples every run)


class _StopCase(Exception):
    """Ends the hypothesis loop at the first failing example."""


def _arrays(result: Any) -> list[np.ndarray]:
    if isinstance(result, (tuple, list)):
        out: list[np.ndarray] = []
        for r in result:
            out.extend(_arrays(r))
        return out
    if isinstance(result, np.ndarray):
        return [result]
    return [result.numpy()]


def _mode(spec: OpSpec, backend: Any, force_composite: bool) -> str:
    if not spec.fused:
        return "primitive"
    if force_composite or not riftco.ops.is_native(backend, spec.op):
        return "composite"
    return "native"


def case_id(spec: OpSpec, dtype: np.dtype, force_composite: bool = False) -> str:
    return f"{spec.op}[{np.dtype(dtype).name}{',composite' if force_composite else ''}]"


class NumericCase:
    """One (op, dtype, mode) row of the report."""

    def __init__(
        self, spec: OpSpec, ctx: Ctx, backend: Any, reference: Any, force_composite: bool = False
    ) -> None:
        self.spec, self.ctx, self.backend, self.reference = spec, ctx, backend, reference
        self.force_composite = force_composite
        self.result = CaseResult(
            case_id(spec, ctx.dtype, force_composite),
            spec.op,
            "numeric",
            ctx.dtype.name,
            _mode(spec, backend, force_composite),
        )
        self.tol = tolerance(spec.op, ctx.dtype)
        self.result.tolerance = self.tol.as_dict()
        if spec.magnitude is not None:
            self.result.tolerance["atol_scale"] = 0.0
        self._failure: tuple[Example, list[Comparison]] | None = None

    def _fn(self, reference: bool) -> Any:
        if self.force_composite and not reference:
            return getattr(composites, self.spec.op)
        return getattr(riftco.ops, self.spec.op, None)

    def check(self, params: dict[str, Any]) -> None:
        if self._failure is not None:  # hypothesis replays the failing example: keep the first
            raise _StopCase
        with np.errstate(all="ignore"):  # inf - inf in an all -inf row is the contract
            self._check(params)

    def _check(self, params: dict[str, Any]) -> None:
        ex = self.spec.build(params, self.ctx)
        got_args = upload_args(ex, self.backend, self.ctx.dtype, reference=False)
        ref_args = upload_args(ex, self.reference, self.ctx.dtype, reference=True)
        got = _arrays(self.spec.call(self._fn(False), got_args, ex.kwargs))
        exp = _arrays(self.spec.call(self._fn(True), ref_args, ex.kwargs))
        self.result.examples += 1
        names = list(self.spec.outputs) + [f"out{i}" for i in range(len(self.spec.outputs), 64)]
        if len(got) != len(exp):
            problem = f"returned {len(got)} outputs, expected {len(exp)}"
            self._failure = (ex, [Comparison("result", (), -1, np.inf, np.inf, problem=problem)])
            raise _StopCase
        scale = self.spec.magnitude(ex) if self.spec.magnitude else 1.0
        r0 = self.result
        r0.tolerance = {
            **self.tol.as_dict(),
            "atol_scale": max(scale, r0.tolerance.get("atol_scale", 0)),
        }
        pairs = zip(names, got, exp, strict=False)
        comps = [compare(n, g, e, self.tol, scale) for n, g, e in pairs]
        r = self.result
        r.max_abs = max([r.max_abs or 0.0] + [c.max_abs for c in comps])
        r.max_rel = max([r.max_rel or 0.0] + [c.max_rel for c in comps])
        if not all(c.ok for c in comps):
            self._failure = (ex, comps)
            raise _StopCase

    def run(self, run: RunSettings) -> CaseResult:
        start = time.perf_counter()
        try:
            for params in self.spec.edges:
                self.check(params)
            self._run_drawn(run)
        except _StopCase:
            pass
        except Exception as exc:  # a crash in the backend (or a riftco error on valid input)
            self.result.status = "error"
            last = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno}"
            self.result.reason = f"{type(exc).__name__}: {exc} (at {where})"
        if self._failure is not None:
            ex, comps = self._failure
            bad = [c for c in comps if not c.ok]
            self.result.status = "fail"
            self.result.example = ex.describe()
            self.result.reason = "; ".join(c.describe() for c in bad)
            self.result.details = [c.as_dict() for c in comps]
        self.result.time_s = time.perf_counter() - start
        return self.result

    def _run_drawn(self, run: RunSettings) -> None:
        if run.max_examples <= 0:
            return

        @settings(
            max_examples=run.max_examples,
            derandomize=run.seed is None,
            database=None,
            deadline=None,
            phases=(Phase.explicit, Phase.generate),
            verbosity=Verbosity.quiet,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        @given(self.spec.draw)
        def drawn(params: dict[str, Any]) -> None:
            self.check(params)

        if run.seed is not None:
            drawn = hypothesis_seed(run.seed)(drawn)
        drawn()
