"""Run one op unit's samples: edges first, then hypothesis-drawn examples, each against the
CPU backend in float64.

For every example the runner checks, in order, and stops at the first failure:

1. the call raises nothing (a crash is recorded as this case's error, with the example);
2. the inputs are bit-for-bit unchanged afterwards (an out-of-place op must not write its
   operands; an in-place op only the tensors it promises to write), read as raw storage so
   a broken strided copy cannot hide it; and still unchanged after a sentinel is written
   into every element of every result's storage (isolation by memory, whatever the buffer
   type: a result that aliases an input, a view or a ``reshape`` of it, changes it);
3. every output matches the reference within the unit's tolerance (NaN and infinities
   exactly where the reference has them);
4. a second call gives the same bits, where the unit promises determinism.

Only the Backend protocol and ``riftco.ops`` are used, so any backend runs the same suite.
Hypothesis draws the parameters; it is derandomised unless a seed is given, and never
shrinks, so a run takes a predictable time and a failure reports the first example that
broke it.
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
from hypothesis import strategies as st
from riftco.errors import DeviceLostError
from riftco.ops.comparison import Comparison, compare
from riftco.ops.dispatch import composite_of
from riftco.ops.opunit import OpUnit
from riftco.ops.primitive.memory import storage_array
from riftco.ops.samples import Ctx, Example, Params
from riftco.tensor import Tensor

from .draw import drawn_params
from .inputs import tensors, upload_args
from .results import CaseResult

#: Drawn examples per case on top of its edge cases: a full cpu run stays well under 60 s.
DEFAULT_MAX_EXAMPLES = 25


@dataclass(frozen=True)
class RunSettings:
    max_examples: int = DEFAULT_MAX_EXAMPLES
    seed: int | None = None  # None: derandomised (the same examples every run)


class _StopCase(Exception):
    """Ends the hypothesis loop at the first failing example."""


def arrays(result: Any) -> list[np.ndarray]:
    if isinstance(result, (tuple, list)):
        out: list[np.ndarray] = []
        for r in result:
            out.extend(arrays(r))
        return out
    if isinstance(result, np.ndarray):
        return [result.copy()]  # the isolation check writes into the op's own array
    if result is None:
        return []
    return [riftco.ops.download(result)]


def mode_of(unit: OpUnit, backend: Any, force_composite: bool) -> str:
    if not unit.fused:
        return "primitive" if unit.kind == "primitive" else "memory"
    if force_composite or not unit.is_native(backend):
        return "composite"
    return "native"


def case_id(unit: OpUnit, dtype: np.dtype, force_composite: bool = False) -> str:
    return f"{unit.name}[{np.dtype(dtype).name}{',composite' if force_composite else ''}]"


def _written(unit: OpUnit) -> set[int]:
    """Positions of the tensor arguments an in-place op writes (its outputs' names)."""
    if not unit.in_place:
        return set()
    import inspect

    params = list(inspect.signature(unit.method).parameters)[1:]
    return {params.index(n) for n in unit.outputs if n in params}


class NumericCase:
    """One (op, dtype, mode) row of the report."""

    def __init__(
        self, unit: OpUnit, ctx: Ctx, backend: Any, reference: Any, force_composite: bool = False
    ) -> None:
        self.unit, self.ctx, self.backend, self.reference = unit, ctx, backend, reference
        self.force_composite = force_composite
        self.result = CaseResult(
            case_id(unit, ctx.dtype, force_composite),
            unit.name,
            "numeric",
            ctx.dtype.name,
            mode_of(unit, backend, force_composite),
        )
        self.tol = unit.tolerance.for_dtype(ctx.dtype)
        self.result.tolerance = self.tol.as_dict()
        self._failure: tuple[Example, list[Comparison]] | None = None
        self._current: Example | None = None
        self._written = _written(unit)

    def _fn(self, reference: bool) -> Any:
        if self.force_composite and not reference:
            return composite_of(self.unit, self._fn(True))
        return self.unit.function or getattr(riftco.ops, self.unit.name)

    def check(self, params: Params) -> None:
        if self._failure is not None:  # hypothesis replays the failing example: keep the first
            raise _StopCase
        with np.errstate(all="ignore"):  # inf - inf in an all -inf row is the contract
            self._check(params)

    def _fail(self, ex: Example, output: str, problem: str) -> None:
        self._failure = (
            ex,
            [Comparison(output, (), -1, np.inf, np.inf, problem=problem, max_ratio=np.inf)],
        )
        raise _StopCase

    def _check(self, params: Params) -> None:
        samples = self.unit.samples
        assert samples is not None
        ex = samples.build(params, self.ctx)
        self._current = ex
        got_args = upload_args(ex, self.backend, self.ctx.dtype, reference=False)
        ref_args = upload_args(ex, self.reference, self.ctx.dtype, reference=True)
        inputs = tensors(got_args)
        before = [_snapshot(t) for t in inputs]
        got_out = samples.call(self._fn(False), got_args, ex.kwargs)
        got = arrays(got_out)
        exp = arrays(samples.call(self._fn(True), ref_args, ex.kwargs))
        self.result.examples += 1
        self._inputs_unchanged(ex, got_args, inputs, before)
        if not self.unit.in_place:
            self._results_isolated(ex, got_out, inputs, before)
        names = list(self.unit.outputs) + [f"out{i}" for i in range(len(self.unit.outputs), 64)]
        if len(got) != len(exp):
            self._fail(ex, "result", f"returned {len(got)} outputs, expected {len(exp)}")
        scale = self.unit.tolerance.scale(ex) if self.unit.tolerance.scale else 1.0
        r = self.result
        assert r.tolerance is not None
        r.tolerance = {
            **self.tol.as_dict(),
            "atol_scale": max(scale, r.tolerance.get("atol_scale", 0)),
        }
        tol = self.unit.tolerance.for_example(self.ctx.dtype, ex)
        comps = [compare(n, g, e, tol, scale) for n, g, e in zip(names, got, exp, strict=False)]
        r.max_abs = max([r.max_abs or 0.0] + [c.max_abs for c in comps])
        r.max_rel = max([r.max_rel or 0.0] + [c.max_rel for c in comps])
        r.max_ratio = max([r.max_ratio or 0.0] + [c.max_ratio for c in comps])
        if not all(c.ok for c in comps):
            self._failure = (ex, comps)
            raise _StopCase
        if self.unit.deterministic and not self.unit.in_place:
            again = arrays(samples.call(self._fn(False), got_args, ex.kwargs))
            for n, a, b in zip(names, got, again, strict=False):
                if not _same_bits(a, b):
                    diff = int(np.count_nonzero(a.view(np.uint8) != b.view(np.uint8)))
                    self._fail(ex, n, f"not deterministic: a second call differs ({diff} bytes)")

    def _inputs_unchanged(
        self, ex: Example, args: list[Any], inputs: list[Any], before: list[np.ndarray]
    ) -> None:
        written = set()
        for i in self._written:  # a list argument (multi-tensor ops) writes each element
            if i < len(args):
                written |= {id(x) for x in args[i]} if isinstance(args[i], list) else {id(args[i])}
        for pos, (t, old) in enumerate(zip(inputs, before, strict=True)):
            if id(t) in written:
                continue
            now = _snapshot(t)
            if not _same_bits(old, now):
                changed = int(np.count_nonzero(old.view(np.uint8) != now.view(np.uint8)))
                self._fail(ex, f"input {pos}", f"wrote into its input ({changed} bytes changed); "
                           "an out-of-place op must leave its operands untouched")  # fmt: skip

    def _results_isolated(
        self, ex: Example, out: Any, inputs: list[Any], before: list[np.ndarray]
    ) -> None:
        """Write a sentinel over each result's whole storage (a host array: in place), then
        read every input back: one that changed shares memory with a result."""
        results = _results(out)
        for r in results:
            if isinstance(r, np.ndarray):
                if r.flags.writeable and r.size:
                    r[...] = _sentinel(r.dtype)
            elif r.storage.size:
                whole = Tensor(r.backend, r.storage, (r.storage.size,), (1,), 0, r.dtype)
                riftco.ops.fill_(whole, _sentinel(r.dtype))
        for pos, (t, old) in enumerate(zip(inputs, before, strict=True)):
            if not _same_bits(old, _snapshot(t)):
                self._fail(ex, f"input {pos}", "shares memory with a result: writing a sentinel "
                           "into the results changed it; a result must be a new allocation, "
                           "not the input, a view or a reshape of it")  # fmt: skip

    def run(self, run: RunSettings) -> CaseResult:
        start = time.perf_counter()
        samples = self.unit.samples
        assert samples is not None
        try:
            for params in samples.edges:
                self.check(params)
            self._run_drawn(run)
        except _StopCase:
            pass
        except DeviceLostError:  # the run's end, not this case's: suite.run_target stops
            raise
        except Exception as exc:  # a crash in the backend (or a riftco error on valid input)
            self.result.status = "error"
            self.result.reason = _crash(exc)
            if self._current is not None:
                self.result.example = self._current.describe()
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
        samples = self.unit.samples
        if run.max_examples <= 0 or samples is None or samples.draw is None:
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
        @given(st.data())
        def drawn(data: Any) -> None:
            self.check(drawn_params(samples, data))

        if run.seed is not None:
            drawn = hypothesis_seed(run.seed)(drawn)
        drawn()


def _snapshot(t: Tensor) -> np.ndarray:
    """``t``'s whole storage as a host copy of the checker's own (a ``to_numpy`` that hands
    out its buffer must not make the before and after pictures one array)."""
    return np.array(storage_array(t), copy=True)


def _results(out: Any) -> list[Any]:
    """The Tensors and host arrays an op returned, flattened."""
    if isinstance(out, (tuple, list)):
        return [x for r in out for x in _results(r)]
    return [out] if isinstance(out, (Tensor, np.ndarray)) else []


def _sentinel(dtype: np.dtype) -> float:
    """A value no sample holds, so writing it always changes an aliased input's bits."""
    return -12345.0 if np.dtype(dtype).kind in "iu" else -1234.5


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _crash(exc: BaseException) -> str:
    """``Type: message (at file:line)`` for the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"
