"""The conformance suite end to end: it passes good backends and names the op of a bad one.

Broken backends are small subclasses of the CPU backend registered at runtime; each breaks
one op in a way a real kernel might (a missing term, an ignored flag, a call before
validation), and the suite must fail *that* op, with numbers and the failing example.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import riftco
from helpers import plugin_for
from riftco.backends.cpu.backend import CPUBackend, view
from riftco.conformance import cli


class WrongSoftmaxBackward(CPUBackend):
    """Forgets the ``- rowsum(dy * y)`` term: right only when dy sums to zero per row."""

    name = "broken_softmax_backward"

    def softmax_backward(self, dy: Any, y: Any) -> Any:
        return self.result(view(dy) * view(y), y.dtype)


class MatmulIgnoresTransposeB(CPUBackend):
    """Reads ``b`` as if ``transpose_b`` were False (a classic indexing bug)."""

    name = "broken_matmul"

    def matmul(self, a: Any, b: Any, transpose_a: bool, transpose_b: bool) -> Any:
        av = np.swapaxes(view(a), -1, -2) if transpose_a else view(a)
        bv = view(b)
        if transpose_b:  # right shape, wrong values: reinterpret the buffer, no transpose
            bv = np.ascontiguousarray(bv).reshape(bv.shape[:-2] + (bv.shape[-1], bv.shape[-2]))
        return self.result(np.matmul(av, bv))


def _run(tmp_path: Path, argv: list[str]) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "report.json"
    rc = cli.main([*argv, "--json", str(out)])
    return rc, json.loads(out.read_text())


def _cases(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for d in report["devices"] for c in d["cases"]}


@pytest.mark.parametrize(
    ("cls", "op"),
    [(WrongSoftmaxBackward, "softmax_backward"), (MatmulIgnoresTransposeB, "matmul")],
    ids=["softmax_backward", "matmul"],
)
def test_broken_backend_fails_at_its_op(
    registry: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], cls: type, op: str
) -> None:
    registry.register(plugin_for(cls), name=cls.name)
    rc, report = _run(tmp_path, [cls.name, "--ops", f"{op},add", "--max-examples", "3"])
    assert rc == 1
    assert report["passed"] is False
    cases = _cases(report)
    bad = cases[f"{op}[float32]"]
    assert bad["status"] == "fail"
    assert bad["details"] and any(d["mismatches"] > 0 for d in bad["details"])
    assert bad["max_abs_err"] > 1e-3
    worst = next(d for d in bad["details"] if d["mismatches"] > 0)
    assert worst["worst_index"] is not None and worst["got"] != worst["expected"]
    assert bad["failing_example"]
    # every other op passes: the report points at the broken one only
    others = {cid: c["status"] for cid, c in cases.items() if c["group"] == "numeric"}
    # float16/bfloat16 run the op in float32 (widened): the broken method shows there too
    floats = sorted(d.name for d in cls.dtypes if riftco.dtypes.is_float(d))
    assert {cid for cid, s in others.items() if s != "pass"} == {f"{op}[{d}]" for d in floats}
    if op == "softmax_backward":  # core's composite on the same backend is still right
        assert cases["softmax_backward[float32,composite]"]["status"] == "pass"
    text = capsys.readouterr().out
    assert f"{op}[float32]" in text and "FAIL" in text and "max abs err" in text


def test_matmul_transpose_b_failure_names_the_flag(registry: Any, tmp_path: Path) -> None:
    registry.register(plugin_for(MatmulIgnoresTransposeB), name="broken_matmul")
    rc, report = _run(tmp_path, ["broken_matmul", "--ops", "matmul", "--max-examples", "0"])
    assert rc == 1
    assert "transpose_b=True" in _cases(report)["matmul[float32]"]["failing_example"]


def test_call_before_validation_is_caught(
    registry: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If core stopped validating shapes, the spy sees the backend called and the case fails."""
    monkeypatch.setattr(riftco.ops.checks, "same_shape", lambda op, *xs: None)
    rc, report = _run(tmp_path, ["cpu", "--ops", "errors/add_shape_mismatch"])
    assert rc == 1
    case = _cases(report)["errors/add_shape_mismatch"]
    assert case["status"] == "fail"
    assert "backend was called before the error: add" in case["reason"]


def test_cpu_passes_quick_full_run(tmp_path: Path) -> None:
    rc, report = _run(tmp_path, ["cpu", "--max-examples", "1", "--quiet"])
    assert rc == 0, [c for c in _cases(report).values() if c["status"] != "pass"]
    assert report["backend"] == "cpu" and report["protocol_version"] == list(
        riftco.PROTOCOL_VERSION
    )
    assert report["riftco_version"] == riftco.__version__
    cases = _cases(report)
    assert cases["model/tiny_transformer"]["status"] == "pass"
    assert all(c["reason"] for c in cases.values() if c["status"] == "skip")
    ops = {c["op"] for c in cases.values()}
    assert set(riftco.backend.FUSED_OPS) <= ops
    assert {"matmul", "sum", "exp", "copy_strided"} <= ops
    assert {c["dtype"] for c in cases.values() if c["group"] == "numeric"} == {
        "bfloat16",
        "float16",
        "float32",
        "float64",
    }


def test_expectations_turn_a_failure_into_xfail(registry: Any, tmp_path: Path) -> None:
    registry.register(plugin_for(WrongSoftmaxBackward), name=WrongSoftmaxBackward.name)
    exp = tmp_path / "exp.json"
    exp.write_text(
        json.dumps(
            {
                "cases": {
                    "softmax_backward[*]": {"status": "xfail", "reason": "known bug #1"},
                    "add[float32]": {"status": "skip", "reason": "not today"},
                    "nonexistent_op[*]": {"status": "skip", "reason": "stale entry"},
                }
            }
        )
    )
    argv = [WrongSoftmaxBackward.name, "--ops", "softmax_backward,add", "--max-examples", "2"]
    rc, report = _run(tmp_path, [*argv, "--expectations", str(exp)])
    assert rc == 0
    cases = _cases(report)
    assert cases["softmax_backward[float32]"]["status"] == "xfail"
    assert "known bug #1" in cases["softmax_backward[float32]"]["reason"]
    assert cases["add[float32]"]["status"] == "skip"
    assert cases["add[float64]"]["status"] == "pass"
    assert [u["pattern"] for u in report["unmatched_expectations"]] == ["nonexistent_op[*]"]


def test_strict_turns_xpass_into_failure(tmp_path: Path) -> None:
    exp = tmp_path / "exp.json"
    exp.write_text(json.dumps({"cases": {"neg[float32]": {"status": "xfail", "reason": "x"}}}))
    argv = ["cpu", "--ops", "neg", "--max-examples", "1", "--expectations", str(exp)]
    rc, report = _run(tmp_path, argv)
    assert rc == 0 and _cases(report)["neg[float32]"]["status"] == "xpass"
    rc, report = _run(tmp_path, [*argv, "--strict"])
    assert rc == 1


def test_unknown_backend_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["no_such_backend"]) == 2
    assert "unknown backend 'no_such_backend'" in capsys.readouterr().err


def test_cffi_example_backend_passes(tmp_path: Path) -> None:
    pytest.importorskip(
        "riftco_cffi_example", reason="pip install ./examples/cffi_backend to run this test"
    )
    rc, report = _run(tmp_path, ["cffi_example", "--max-examples", "1", "--quiet"])
    assert rc == 0, [c for c in _cases(report).values() if c["status"] not in ("pass", "skip")]
    cases = _cases(report)
    assert cases["softmax[float32]"]["mode"] == "native"
    assert cases["gelu[float32]"]["mode"] == "composite"
    assert not any(c["dtype"] == "float64" for c in cases.values())
