"""A lost device (a sticky driver error such as CUDA's illegal address) ends a conformance
run at the case that lost it: that case is an error naming the cause, every later case is
listed as not run, and none of them piles up an error of its own."""

from __future__ import annotations

import pytest
import riftco
from riftco.conformance.expectations import Expectations
from riftco.conformance.runner import RunSettings
from riftco.conformance.suite import resolve, run_target


def test_a_lost_device_stops_the_run_at_its_first_case(monkeypatch: pytest.MonkeyPatch) -> None:
    (target,) = resolve("cpu:0")
    backend = riftco.get_registry().instance("cpu", 0)
    calls = {"n": 0}

    def lost(*args: object, **kwargs: object) -> None:
        calls["n"] += 1
        raise riftco.DeviceLostError("[cuda] synchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS")

    monkeypatch.setattr(type(backend), "exp", lost)
    target.ops = ["neg", "exp", "softmax", "add"]
    results = list(run_target(target, RunSettings(max_examples=1), Expectations()))
    ids = [r.case_id for r in results]
    first_exp = next(i for i, r in enumerate(results) if r.op == "exp")
    assert [r.status for r in results[:first_exp]] == ["pass"] * first_exp, results[:first_exp]
    lost_case = results[first_exp]
    assert lost_case.status == "error"
    assert "DeviceLostError" in lost_case.reason and "ILLEGAL_ADDRESS" in lost_case.reason
    rest = results[first_exp + 1 :]
    assert rest, ids  # softmax and add cases were planned after exp
    assert all(r.status == "skip" for r in rest), [(r.case_id, r.status) for r in rest]
    assert all(
        r.reason.startswith(f"not run: the device was lost at {ids[first_exp]}") for r in rest
    )
    assert calls["n"] == 1  # no later case called into the lost device


def test_an_ordinary_error_does_not_stop_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The contrast: a plain crash is that case's error, and the run goes on."""
    (target,) = resolve("cpu:0")
    backend = riftco.get_registry().instance("cpu", 0)

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in exp")

    monkeypatch.setattr(type(backend), "exp", crash)
    target.ops = ["exp", "add"]
    results = list(run_target(target, RunSettings(max_examples=1), Expectations()))
    assert any(r.op == "exp" and r.status == "error" for r in results)
    assert any(r.op == "add" and r.status == "pass" for r in results)
