"""The whole suite for one backend device: plan the cases, apply expectations, run them.

Used by both front ends (``riftco conformance`` and the pytest plugin), so they run the
same cases with the same ids.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import riftco
from riftco.dtypes import LOW_PRECISION, is_float
from riftco.errors import DeviceLostError
from riftco.ops.opunit import units
from riftco.ops.samples import Ctx
from riftco.plugins import BackendEntry, get_registry

from .capture_check import capture_case_id, capture_results
from .contract import domain_cases, error_cases, numeric_units, protocol_results
from .expectations import Expectations, glob_match
from .memory_check import memory_cases
from .model_check import model_results
from .results import CaseResult
from .runner import NumericCase, RunSettings, _crash, case_id
from .training_check import capture_training_results, training_results

REFERENCE = "cpu"


@dataclass
class PlannedCase:
    case_id: str
    op: str
    run: Callable[[], list[CaseResult]]


@dataclass
class Target:
    """One backend device under test."""

    entry: BackendEntry
    index: int
    backend: Any = None
    reference: Any = None
    ops: list[str] = field(default_factory=list)  # --ops patterns; empty: everything
    only: tuple[np.dtype, ...] = ()  # --dtypes: the float dtypes checked; empty: all
    matched: set[str] = field(default_factory=set)  # --ops patterns that picked a case
    asked: set[str] = field(default_factory=set)  # op names and case ids planning saw

    @property
    def label(self) -> str:
        return f"{self.entry.name}:{self.index}"

    def float_dtypes(self) -> tuple[np.dtype, ...]:
        dts = sorted((d for d in self.backend.dtypes if is_float(d)), key=str)
        return tuple(np.dtype(d) for d in dts)

    def checked_dtypes(self) -> tuple[np.dtype, ...]:
        """The float dtypes whose cases run (``--dtypes``), in the device's order."""
        return tuple(d for d in self.float_dtypes() if not self.only or d in self.only)

    def index_dtypes(self) -> tuple[np.dtype, ...]:
        dts = [np.dtype(d) for d in (np.int32, np.int64) if np.dtype(d) in self.backend.dtypes]
        return tuple(dts)

    def wanted(self, op: str, cid: str) -> bool:
        if not self.ops:
            return True
        self.asked.update((op, cid))
        hits = [p for p in self.ops if glob_match(op, p) or glob_match(cid, p)]
        self.matched.update(hits)
        return bool(hits)


class UnknownOpsError(riftco.RiftcoError, ValueError):
    """An ``--ops`` pattern that names no op and no case: a typo must not pass as "OK"."""


def check_patterns(target: Target) -> None:
    """Raise :class:`UnknownOpsError` for an ``--ops`` pattern that picked no case here and
    matches no op unit (an op whose cases this device skips, e.g. for its dtypes, is fine),
    naming the closest op names and case ids."""
    known = {u.name for u in units()} | {"protocol", "tiny_transformer", *target.asked}
    bad = [
        p
        for p in target.ops
        if p not in target.matched and not any(glob_match(name, p) for name in known)
    ]
    if not bad:
        return
    parts = []
    for p in bad:
        close = difflib.get_close_matches(p, sorted(known), n=4, cutoff=0.5)
        hint = f"closest: {', '.join(close)}" if close else "no op name is close"
        parts.append(f"{p!r} matches no op or case id ({hint})")
    raise UnknownOpsError(
        f"[conformance] --ops {'; '.join(parts)}. Patterns are comma-separated op names or "
        "case-id globs, e.g. 'softmax*,matmul'"
    )


def resolve(spec: str) -> list[Target]:
    """``NAME`` (every device) or ``NAME:N`` -> targets; raises riftco errors with reasons."""
    name, _, index = spec.partition(":")
    registry = get_registry()
    entry = registry.entry(name)
    if not entry.available:
        raise riftco.BackendUnavailableError(
            f"[conformance] backend {name!r} is unavailable: {entry.reason}"
        )
    n = len(entry.devices())
    if index:
        if not index.isdigit() or int(index) >= n:
            raise riftco.UnknownBackendError(
                f"[conformance] backend {name!r} has {n} device(s); {spec!r} names none of them"
            )
        return [Target(entry, int(index))]
    return [Target(entry, i) for i in range(n)]


def plan(target: Target, run: RunSettings) -> list[PlannedCase]:
    registry = get_registry()
    target.backend = registry.instance(target.entry.name, target.index)
    target.reference = registry.instance(REFERENCE, 0)
    backend, cls = target.backend, target.entry.cls
    assert cls is not None  # resolve() only returns available backends
    device = target.entry.devices()[target.index]
    planned = [PlannedCase("protocol", "protocol", partial(protocol_results, cls, backend, device))]
    for dtype in target.checked_dtypes():
        ctx = Ctx(dtype, target.float_dtypes(), target.index_dtypes())
        for unit in numeric_units():
            modes = [False]
            if unit.fused and unit.is_native(backend):
                modes.append(True)  # also run core's composite on this backend
            for forced in modes:
                cid = case_id(unit, dtype, forced)
                if not target.wanted(unit.name, cid):
                    continue
                assert unit.samples is not None
                if unit.samples.needs_index and not ctx.index_dtypes:
                    reason = "backend declares no index dtype (int32 or int64)"
                    planned.append(PlannedCase(cid, unit.name, _skipped(cid, unit.name, reason)))
                    continue
                if unit.full_precision and dtype in LOW_PRECISION:
                    reason = f"{unit.name} refuses {dtype.name}: optimizer state stays float32"
                    planned.append(PlannedCase(cid, unit.name, _skipped(cid, unit.name, reason)))
                    continue
                case = NumericCase(unit, ctx, backend, target.reference, forced)
                planned.append(PlannedCase(cid, unit.name, partial(_numeric, case, run)))
    for dtype in target.checked_dtypes():  # the capture section: eager vs replayed bits
        ctx = Ctx(dtype, target.float_dtypes(), target.index_dtypes())
        for unit in numeric_units():
            cid = capture_case_id(unit, dtype)
            assert unit.samples is not None
            if (
                not target.wanted(unit.name, cid)
                or (unit.samples.needs_index and not ctx.index_dtypes)
                or (unit.full_precision and dtype in LOW_PRECISION)
            ):
                continue
            for forced in [False] + ([True] if unit.fused and unit.is_native(backend) else []):
                cid = capture_case_id(unit, dtype, forced)
                replayed = partial(capture_results, unit, ctx, backend, forced)
                planned.append(PlannedCase(cid, unit.name, replayed))
    for group in (error_cases(backend), domain_cases(backend), memory_cases(backend)):
        for cid, op, run_one in group:
            if target.wanted(op, cid) or target.wanted(cid.split("/")[0], cid):
                planned.append(PlannedCase(cid, op, partial(_single, run_one)))
    if target.wanted("tiny_transformer", "model/tiny_transformer"):
        planned.append(
            PlannedCase(
                "model/tiny_transformer",
                "tiny_transformer",
                lambda: model_results(backend, target.reference),
            )
        )
    training = "tiny_transformer_training"
    if target.wanted(training, f"model/{training}"):
        trained = partial(training_results, backend, target.reference)
        planned.append(PlannedCase(f"model/{training}", training, trained))
    if target.wanted(training, f"capture/{training}"):
        replayed = partial(capture_training_results, backend)
        planned.append(PlannedCase(f"capture/{training}", training, replayed))
    check_patterns(target)
    return planned


def _numeric(case: NumericCase, run: RunSettings) -> list[CaseResult]:
    return [case.run(run)]


def _single(run_one: Callable[[], CaseResult]) -> list[CaseResult]:
    return [run_one()]


def _skipped(cid: str, op: str, reason: str) -> Callable[[], list[CaseResult]]:
    return lambda: [
        CaseResult(
            cid,
            op,
            "numeric",
            cid.split("[")[1].split(",")[0].rstrip("]"),
            status="skip",
            reason=reason,
        )
    ]


def apply_expectation(result: CaseResult, expectations: Expectations) -> CaseResult:
    exp = expectations.lookup(result.case_id)
    if exp is None:
        return result
    if exp.status == "skip":
        result.status, result.reason = "skip", f"expectations file: {exp.reason}"
    elif result.status in ("fail", "error"):
        result.status, result.reason = (
            "xfail",
            f"{exp.reason} (failed as expected: {result.reason})",
        )
    elif result.status == "pass":
        result.status, result.reason = "xpass", f"expected to fail ({exp.reason}) but passed"
    return result


def run_target(
    target: Target, run: RunSettings, expectations: Expectations
) -> Iterator[CaseResult]:
    """Yield results as they come (the CLI prints them live). A lost device (a sticky
    driver error) ends the run at the case that lost it: the rest are listed as not run."""
    lost: str | None = None
    for planned in plan(target, run):
        exp = expectations.lookup(planned.case_id) if planned.case_id != "protocol" else None
        if exp is not None and exp.status == "skip":
            exp.matched -= 1  # apply_expectation below counts it
            dtype = planned.case_id.partition("[")[2].split(",")[0].rstrip("]") or "-"
            group = planned.case_id.split("/")[0] if "/" in planned.case_id else "numeric"
            res = CaseResult(planned.case_id, planned.op, group, dtype)
            yield apply_expectation(res, expectations)
            continue
        if exp is not None:
            exp.matched -= 1
        if lost is not None:  # every later case would fail the same way: say so once
            yield _not_run(planned, lost)
            continue
        start = time.perf_counter()
        try:
            results = _run_safely(planned)
        except DeviceLostError as exc:
            lost = f"{planned.case_id}: {exc}"
            reason = f"{_crash(exc)}; the device is lost, the remaining cases are not run"
            results = [_case_result(planned, "error", reason)]
        for res in results:
            res.time_s = res.time_s or time.perf_counter() - start
            yield apply_expectation(res, expectations)


def _not_run(planned: PlannedCase, lost: str) -> CaseResult:
    return _case_result(planned, "skip", f"not run: the device was lost at {lost}")


def _case_result(planned: PlannedCase, status: str, reason: str) -> CaseResult:
    group = planned.case_id.split("/")[0] if "/" in planned.case_id else "numeric"
    return CaseResult(planned.case_id, planned.op, group, status=status, reason=reason)


def _run_safely(planned: PlannedCase) -> list[CaseResult]:
    """A case that raises (the model check included) is that case's error, never the run's."""
    try:
        return planned.run()
    except DeviceLostError:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded, and the run goes on
        return [_case_result(planned, "error", _crash(exc))]
