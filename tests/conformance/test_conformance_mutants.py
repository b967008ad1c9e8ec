"""The conformance suite's own test: every deliberately broken backend fails, at its op.

For each mutant (``conformance_mutants.py``: 66 plausible bugs over every op module) the
suite runs on that op's cases and must report a failure or error there, with the op in the
case id or the message. Whole-suite runs then check that no *other* op is blamed
(composites built on a broken primitive may fail too: they really are wrong there), and
that a raising model check still ends with the table and the JSON.

``make test`` runs three mutants through every case; ``make test-deep`` runs all 66
through every case their bug can reach (``conformance_trace.py``: the others run the
reference's own code and pass as it does). The three full runs also check that trace:
every case they find failing is one it names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conformance_mutants import (
    MUTANTS,
    AttentionMasksDiagonal,
    Base,
    CastFlushesSubnormals,
    DenseOnlyCopyIgnoresOffset,
    ExpIgnoresOffset,
    LayerNormBackwardDgammaOff,
    SoftmaxWithoutMaxSubtraction,
    ToNumpyReturnsBufferView,
)
from conformance_trace import OUTSIDE, cases_reaching, ops_argument, trace_cases
from helpers import plugin_for
from riftco.backends.cpu.backend import view
from riftco.conformance import cli
from riftco.tensor import Tensor


def _run(registry: Any, cls: type[Base], tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    named = type(cls.__name__, (cls,), {"name": "mutant"})
    registry.register(plugin_for(named), name="mutant")
    out = tmp_path / "report.json"
    rc = cli.main(["mutant", *argv, "--json", str(out), "--quiet"])
    return rc, json.loads(out.read_text())


def _bad(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for d in report["devices"] for c in d["cases"] if c["status"] in ("fail", "error")]


def test_at_least_thirty_distinct_bugs_over_every_op_module() -> None:
    assert len(MUTANTS) >= 30 and len({cls for cls, _ in MUTANTS}) == len(MUTANTS)
    from riftco.ops import units

    modules = {u.module for u in units() if u.samples is not None}
    blamed = {next(u.module for u in units() if u.name == op) for _, op in MUTANTS}
    assert modules <= blamed, modules - blamed


@pytest.mark.parametrize(("cls", "op"), MUTANTS, ids=[c.__name__ for c, _ in MUTANTS])
def test_mutant_fails_at_its_op(registry: Any, tmp_path: Path, cls: type[Base], op: str) -> None:
    rc, report = _run(registry, cls, tmp_path, "--ops", f"{op}[*", "--max-examples", "5")
    bad = _bad(report)
    assert rc == 1 and bad, f"{cls.__name__}: the suite passed a broken {op}"
    named = [c for c in bad if c["op"] == op or c["reason"].startswith(f"[{op}]")]
    assert named, [(c["id"], c["reason"][:200]) for c in bad]
    assert all(c["failing_example"] or c["reason"] for c in named)


#: A whole-suite run costs ~15 s (half of it the capture section): three stand for the rest
#: in ``make test``; ``RIFTCO_MUTANTS=all`` (``make test-deep``, CI) runs every mutant, on
#: the cases its bug reaches, with the targeted runs' 5 examples (at 2, CompareLeIsLt
#: draws no tie and passes).
_DEEP = os.environ.get("RIFTCO_MUTANTS") == "all"
_EXAMPLES = "5" if _DEEP else "2"
_WHOLE_SUITE = (
    MUTANTS
    if _DEEP
    else [(ExpIgnoresOffset, "exp"), (SoftmaxWithoutMaxSubtraction, "softmax"),
          (LayerNormBackwardDgammaOff, "layer_norm_backward")]
)  # fmt: skip
#: Mutants of what core uses to prepare every other op's operands (a dense-only backend's
#: copy of a view; the cast that widens float16 operands to float32 and rounds results
#: back): every op that receives a copied view, or runs widened, is really wrong there.
_PREPARES_OPERANDS = {DenseOnlyCopyIgnoresOffset, CastFlushesSubnormals}
#: Mutants of the download every case reads its results through: every case fails, and
#: each must say that op broke.
_READS_EVERY_RESULT = {ToNumpyReturnsBufferView}
#: case id -> the backend methods it calls, traced once per worker process.
_TRACE: dict[str, set[str]] = {}


def _trace(registry: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, set[str]]:
    if not _TRACE:
        _TRACE.update(trace_cases(registry, monkeypatch, tmp_path, "--max-examples", _EXAMPLES))
    return _TRACE


@pytest.mark.parametrize(("cls", "op"), _WHOLE_SUITE, ids=[c.__name__ for c, _ in _WHOLE_SUITE])
def test_whole_suite_blames_no_other_op(
    registry: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cls: type[Base], op: str
) -> None:
    reaching = cases_reaching(_trace(registry, monkeypatch, tmp_path), cls)
    only = ["--ops", ops_argument(reaching)] if _DEEP and reaching is not None else []
    rc, report = _run(registry, cls, tmp_path, *only, "--max-examples", _EXAMPLES)
    assert rc == 1
    bad = _bad(report)
    assert any(c["op"] == op for c in bad), f"{cls.__name__}: {op} itself passed"
    if not only and reaching is not None:  # a full run: the trace must have named them
        unnamed = [c["id"] for c in bad if c["id"] not in reaching]
        assert unnamed == [], f"failing cases the trace says {cls.__name__} cannot reach"
    if cls in _READS_EVERY_RESULT:
        assert all(c["op"] == op or f"[{op}]" in c["reason"] for c in bad), bad[:3]
        return
    if cls in _PREPARES_OPERANDS:
        return
    wrongly = [
        c["id"] for c in bad
        if c["op"] != op and c["mode"] in ("primitive", "native", "memory")
    ]  # fmt: skip
    assert wrongly == [], wrongly


def replays_recorded_calls(method: str) -> type[Base]:
    """The reference with ``method`` keeping the results of calls made while a step is
    recorded (``riftco.capture`` shadows the backend's methods then) and answering later
    calls with the same argument layouts with them: a backend "graph" that keeps the
    recorded call's buffers instead of binding the replay's."""

    def call(self: Base, *args: Any) -> Any:
        baked: dict[Any, list[np.ndarray]] = self.__dict__.setdefault("_baked", {})
        key = tuple(
            (a.shape, a.strides, a.offset, a.dtype) if isinstance(a, Tensor) else repr(a)
            for a in args
        )
        if key in baked:
            outs = [self.result(v.copy()) for v in baked[key]]
            return outs[0] if len(outs) == 1 else tuple(outs)
        out = getattr(Base, method)(self, *args)
        if method in vars(self):  # shadowed: this call is being recorded
            baked[key] = [view(o).copy() for o in (out if isinstance(out, tuple) else (out,))]
        return out

    return type(f"{method.title().replace('_', '')}ReplaysRecordedCall", (Base,), {method: call})


GeluReplaysRecordedCall = replays_recorded_calls("gelu")


def test_capture_section_replays_on_other_values_than_it_recorded(
    registry: Any, tmp_path: Path
) -> None:
    """Recorded and replayed on the same values, the baked result would be the right one."""
    rc, report = _run(registry, GeluReplaysRecordedCall, tmp_path, "--ops", "capture/gelu[*")
    bad = _bad(report)
    assert rc == 1 and bad and all(c["id"].startswith("capture/gelu[") for c in bad), bad
    assert all("replay differs from the eager call in out" in c["reason"] for c in bad)
    assert all("recorded on" in c["failing_example"] for c in bad)
    registry.unregister("mutant")
    rc, report = _run(registry, GeluReplaysRecordedCall, tmp_path, "--ops", "gelu[*")
    assert rc == 0, _bad(report)  # eager calls (the numeric section) never see it


def test_capture_section_replays_a_training_step_too(registry: Any, tmp_path: Path) -> None:
    baking = replays_recorded_calls("linear_gelu")  # the model's MLP runs the fused layer
    rc, report = _run(registry, baking, tmp_path, "--ops", "*tiny_transformer_training")
    bad = _bad(report)
    assert rc == 1 and [c["id"] for c in bad] == ["capture/tiny_transformer_training"], bad
    assert "replayed steps differ from the eager ones" in bad[0]["reason"]


class LinearPacksWeightPerBuffer(Base):
    """Packs each weight buffer once (keyed by the buffer, as GEMM libraries' packed-weight
    caches key on a pointer) and reuses the pack while that buffer lives. Every op case
    passes: each call gets a fresh buffer. A training step writes the weights in place, so
    from a model's second step on the forward reads the first step's weights."""

    def linear(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        packs: dict[int, Any] = self.__dict__.setdefault("_buffer_packs", {})
        key = id(weight.storage)  # the storage is kept below: its id is never reused
        if key not in packs:
            packs[key] = (weight.storage, np.array(view(weight)))
        return self.result(view(x) @ packs[key][1] + view(bias), x.dtype)


def test_training_check_sees_weights_cached_per_buffer(registry: Any, tmp_path: Path) -> None:
    """Every linear case passes (fresh buffers each call); the training steps do not."""
    rc, report = _run(
        registry, LinearPacksWeightPerBuffer, tmp_path, "--ops", "linear[*,*tiny_transformer*"
    )
    bad = _bad(report)
    assert rc == 1 and [c["id"] for c in bad] == ["model/tiny_transformer_training"], bad
    assert "step1/loss" in bad[0]["reason"]  # the first forward after an in-place update


class ModelCheckRaises(AttentionMasksDiagonal):
    """Raises inside the model check's attention (heads > 1): the run must still finish."""

    def attention_qkv(self, qkv: Any, heads: int, scale: float, causal: bool, flash: bool) -> Any:
        if heads == 2 and view(qkv).shape[1] == 9:  # the model check's shape
            raise RuntimeError("kernel launch failed")
        return super().attention_qkv(qkv, heads, scale, causal, flash)


def test_a_raising_model_check_is_a_case_error_and_the_run_finishes(
    registry: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, report = _run(registry, ModelCheckRaises, tmp_path, "--ops", "tiny_transformer,softmax")
    assert rc == 1 and report["complete"] is True
    model = next(c for c in _bad(report) if c["id"] == "model/tiny_transformer")
    assert model["status"] == "error" and "kernel launch failed" in model["reason"]
    out = capsys.readouterr().out
    assert "model/tiny_transformer" in out and "FAILED" in out  # the table and the summary


def test_trace_picks_the_cases_a_mutant_reaches_and_otherwise_everything() -> None:
    """The selection behind ``make test-deep``'s whole-suite runs, on a made-up trace."""
    trace = {
        "exp[float32]": {"exp"},
        "softmax[float32,composite]": {"exp", "sum", "div"},
        "add[float32]": {"add"},
        OUTSIDE: {"allocate"},
    }

    class ExpOnly(Base):
        def exp(self, x: Any) -> Any:
            return super().exp(x)

    class Flagged(Base):
        accepts_strided = False

    class NewHelper(Base):
        def _fast_path(self) -> None: ...

    class AllocateWrong(Base):
        def allocate(self, shape: Any, dtype: Any) -> Any:
            return super().allocate(shape, dtype)

    assert cases_reaching(trace, ExpOnly) == ["exp[float32]", "softmax[float32,composite]"]
    for unaccountable in (Flagged, NewHelper, AllocateWrong):
        assert cases_reaching(trace, unaccountable) is None, unaccountable.__name__
    arg = ops_argument(["softmax[float32,composite]"]).split(",")
    assert arg == ["softmax[float32?composite]", "softmax[float32]"]  # the capture plan's id too
    capture = ops_argument(["capture/gelu[float32,composite]"])  # planned under its plain id
    assert capture == "capture/gelu[float32]"
