"""What the published certificate promises: coverage, provenance without private paths, the
error-to-allowed ratio, and ``--compare`` naming the regressions between two reports."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from conformance_mutants import SoftmaxWithoutMaxSubtraction
from helpers import plugin_for
from riftco.backend import FUSED_OPS, DeviceInfo
from riftco.backends.cpu.backend import CPUBackend
from riftco.conformance import cli
from riftco.conformance.provenance import command, scrub
from riftco.ops.comparison import compare
from riftco.ops.opunit import Tolerance


def _run(tmp_path: Path, argv: list[str], name: str = "report") -> tuple[int, dict[str, Any], str]:
    page, report = tmp_path / f"{name}.html", tmp_path / f"{name}.json"
    rc = cli.main([*argv, "--html", str(page), "--json", str(report), "--quiet"])
    return rc, json.loads(report.read_text()), page.read_text(encoding="utf-8")


class PartialBackend(CPUBackend):
    """Three optional ops short, no strided input, and a device detail that is a path."""

    name: ClassVar[str] = "partial"
    accepts_strided: ClassVar[bool] = False
    dtypes: ClassVar[frozenset[np.dtype]] = frozenset({np.dtype(np.float32), np.dtype(np.int32)})
    gelu = None  # type: ignore[assignment]
    gelu_backward = None  # type: ignore[assignment]
    adam_update = None  # type: ignore[assignment]

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        cache = Path.home() / ".cache" / "partial" / "kernels"
        return [DeviceInfo(0, "partial host", ("float32", "int32"), {"cache": str(cache)})]


def test_ratio_is_error_over_allowed_error() -> None:
    tol = Tolerance(atol=1e-3, rtol=1e-2)
    expected = np.array([0.0, 10.0, -2.0])
    got = expected + np.array([2e-4, 0.05, 0.0])  # allowed: 1e-3, 0.101, 0.021
    c = compare("out", got, expected, tol)
    assert c.ok and c.max_ratio == pytest.approx(0.05 / 0.101, rel=1e-9)
    bad = compare("out", np.array([0.0, np.nan, -2.0]), expected, tol)
    assert not bad.ok and bad.max_ratio == float("inf")


def test_summary_grid_and_folded_details_for_a_partial_backend(
    registry: Any, tmp_path: Path
) -> None:
    registry.register(plugin_for(PartialBackend), name="partial-plugin")
    rc, report, page = _run(tmp_path, ["partial", "--ops", "gelu,softmax", "--max-examples", "1"])
    assert rc == 0, report["summary"]
    cov = report["devices"][0]["coverage"]
    assert cov["optional_missing"] == ["gelu", "gelu_backward", "adam_update"]
    assert len(cov["optional_native"]) == len(FUSED_OPS) - 3
    assert cov["dtypes_checked"] == ["float32"] and cov["accepts_strided"] is False
    summary = page.index('id="summary"')
    native = f"{len(FUSED_OPS) - 3} of {len(FUSED_OPS)} optional ops native"
    for text in (native, "gelu, gelu_backward, adam_update",
                 "not accepted", "cores", 'id="reproduce"'):  # fmt: skip
        assert page.index(text) > summary, text
    # the summary and the command come before the grid, which comes before the details
    assert page.index('id="reproduce"') < page.index('class="grid"') < page.index("<details")
    assert page.count("<details") == len({c["op"] for c in report["devices"][0]["cases"]})
    passing = [c for c in report["devices"][0]["cases"] if c["id"] == "softmax[float32]"]
    assert passing and 0 <= passing[0]["err_ratio"] <= 1


def test_no_absolute_path_reaches_the_certificate(registry: Any, tmp_path: Path) -> None:
    registry.register(plugin_for(PartialBackend), name="partial-plugin")
    expectations = tmp_path / "deep" / "mine.toml"
    expectations.parent.mkdir()
    expectations.write_text('[cases."gelu[float32]"]\nstatus = "skip"\nreason = "later"\n')
    argv = ["partial", "--ops", "gelu", "--max-examples", "0", "--no-throughput",
            "--expectations", str(expectations)]  # fmt: skip
    rc, report, page = _run(tmp_path, argv)
    text = json.dumps(report)
    for private in (str(tmp_path), str(Path.home()), os.getcwd(), sys.prefix):
        assert private not in text and private not in page, private
    assert report["settings"]["expectations"] == "mine.toml"
    assert report["devices"][0]["device_details"]["cache"] == "~/.cache/partial/kernels"
    assert report["command"] == (
        "riftco conformance partial --ops gelu --max-examples 0 --no-throughput "
        "--expectations mine.toml --html report.html --json report.json --quiet"
    )


def test_scrub_leaves_ratios_and_relative_paths_alone() -> None:
    assert scrub("max err 1/2 in x/y/z, a (1)/2") == "max err 1/2 in x/y/z, a (1)/2"
    assert scrub(f"at {os.getcwd()}/conformance/cli.py:3") == "at conformance/cli.py:3"
    assert command("cpu:0", ["cpu:0", "--json=/a/b/r.json"]) == (
        "riftco conformance cpu:0 --json r.json"
    )


def test_libraries_and_machine_are_named(tmp_path: Path) -> None:
    rc, report, page = _run(tmp_path, ["cpu", "--ops", "neg", "--max-examples", "0"])
    assert rc == 0
    assert report["libraries"]["numpy"] == np.__version__  # riftco requires numpy
    assert "metalcompute" not in report["libraries"]  # a macOS-only requirement
    assert report["machine"]["cores"] == str(os.cpu_count())
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():  # Linux: the model and the vector extensions a CPU backend uses
        text = cpuinfo.read_text()
        first = text.split("\n\n")[0]
        model = next((ln.split(":", 1)[1].strip() for ln in first.splitlines()
                      if ln.startswith("model name")), None)  # fmt: skip
        if model is not None:  # (ARM kernels name no model)
            assert report["machine"]["cpu"] == model and model in page
        if " avx2 " in f" {first} ".replace("\n", " "):
            assert "avx2" in report["machine"]["cpu_flags"].split(", ")
    assert f"numpy {np.__version__}" in page


def _report(cases: dict[str, tuple[str, float | None]], native: list[str]) -> dict[str, Any]:
    rows = [{"id": cid, "status": s, "err_ratio": r, "reason": ""} for cid, (s, r) in cases.items()]
    return {"devices": [{"device": "x:0", "cases": rows, "coverage": {"optional_native": native}}]}


def test_compare_lists_regressions_and_only_them(tmp_path: Path) -> None:
    old = _report({"a[f]": ("pass", 0.01), "b[f]": ("fail", 2.0), "c[f]": ("pass", 0.1),
                   "d[f]": ("pass", 0.1), "gone": ("pass", None)}, ["gelu", "softmax"])  # fmt: skip
    new = _report({"a[f]": ("error", None), "b[f]": ("pass", 0.3), "c[f]": ("pass", 0.9),
                   "d[f]": ("skip", None), "new": ("fail", 9.0)}, ["softmax"])  # fmt: skip
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    from riftco.conformance.compare import compare as compare_reports

    diff = compare_reports(old, new)
    assert diff.regressions == [
        "x:0 a[f]: pass -> error",
        "x:0 d[f]: pass -> skip",
        "x:0 gelu: native -> composite",
    ]
    assert diff.fixed == ["x:0 b[f]: fail -> pass"] and diff.only_old == diff.only_new == 1
    assert diff.closer == ["x:0 c[f]: err / allowed 0.1 -> 0.9"]
    assert cli.main([str(tmp_path / "new.json"), "--compare", str(tmp_path / "old.json")]) == 1
    assert cli.main([str(tmp_path / "old.json"), "--compare", str(tmp_path / "old.json")]) == 0


def test_compare_a_run_against_an_older_certificate(
    registry: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--ops", "softmax[float32]", "--max-examples", "1", "--no-throughput"]
    rc, _, _ = _run(tmp_path, ["cpu", *argv], "old")
    assert rc == 0
    registry.register(plugin_for(SoftmaxWithoutMaxSubtraction), name="mutant")
    rc = cli.main(["mutant", *argv, "--quiet", "--compare", str(tmp_path / "old.json")])
    out = capsys.readouterr().out
    assert rc == 1 and "1 regression(s)" in out and "softmax[float32]: pass -> fail" in out


def test_compare_names_an_unreadable_report(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "x.json").write_text("{}")
    assert cli.main([str(tmp_path / "x.json"), "--compare", str(tmp_path / "x.json")]) == 2
    assert "is not a riftco conformance JSON report" in capsys.readouterr().err


def test_a_grid_cell_shows_its_worst_case_and_a_skip_only_when_nothing_ran() -> None:
    from riftco.conformance.html import _grid

    def case(cid: str, op: str, status: str, ratio: float | None, group: str = "numeric") -> dict:
        return {"id": cid, "op": op, "group": group, "dtype": "float32", "mode": "native",
                "status": status, "err_ratio": ratio}  # fmt: skip

    page = _grid([
        case("a[float32]", "a", "pass", 0.25), case("capture/a[float32]", "a", "skip", None,
                                                     "capture"),
        case("b[float32]", "b", "pass", 0.5), case("b[float32,composite]", "b", "fail", 3.0),
        case("c[float32]", "c", "skip", None),
    ])  # fmt: skip
    cells = re.findall(r'<td class="cell-(\w+) s-\w+" title="[^"]*">([^<]*)</td>', page)
    assert cells == [("pass", "PASS 0.25"), ("fail", "FAIL 3"), ("skip", "SKIP")]
