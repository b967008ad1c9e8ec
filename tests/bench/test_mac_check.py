"""`make mac-check` end to end on the Metal stand-in, so the Mac command is not dead code.

bench/mac_check.py is what a Mac user runs first; here it runs with ``--quick`` on the
OpenCL stand-in (RIFTCO_METAL_STANDIN=1) and every file it promises is checked against
facts it does not compute itself: the conformance report's own case list, the first loss
of an untrained model (close to ln(vocab)), the dispatch count seen two ways. Without the
stand-in on Linux it must fail, saying why, and still write the folder.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "mac_check.py"
VOCAB = 65  # bench/train_step.py's vocabulary

try:  # the stand-in runs on OpenCL; the tests that do not need it run regardless
    from riftco.backends.opencl import runtime as clrt

    _devices, _why = clrt.enumerate_devices()
except Exception as exc:  # pyopencl missing or broken
    _devices, _why = [], f"pyopencl import failed: {exc}"
needs_standin = pytest.mark.skipif(not _devices, reason=f"the stand-in needs OpenCL: {_why}")


def _env(standin: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFTCO_")}
    if standin:
        env["RIFTCO_METAL_STANDIN"] = "1"
    return env


def _run(args: list[str], standin: bool, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        env=_env(standin),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


RUNTIMES = ("objc", "metalcompute")


def _check_folder(out: Path) -> None:
    """Everything a quick run on the stand-ins must leave, checked independently: one
    folder per Metal runtime (the objc runtime on its fake, metalcompute on its stand-in)."""
    for name in ("summary.md", "machine.json", "backends.txt"):
        assert (out / name).is_file(), f"mac-check did not write {name}"
    for runtime in RUNTIMES:
        for name in ("conformance.txt", "conformance.json", "train.log", "bench.json",
                     "calls.json", "long_run.json"):  # fmt: skip
            assert (out / runtime / name).is_file(), f"mac-check did not write {runtime}/{name}"
    assert (out / "objc" / "conformance-validation.json").is_file()
    with zipfile.ZipFile(out.parent / f"{out.name}.zip") as z:
        assert f"{out.name}/summary.md" in z.namelist()

    summary = (out / "summary.md").read_text()
    assert "not on Metal" in summary and "stand-in" in summary  # never claims Metal
    rows = dict(re.findall(r"^\| ([^|]+?) \| (PASS|FAIL|SKIP) \|", summary, re.M))
    want = {f"{part} [{r}]": "PASS" for r in RUNTIMES
            for part in ("conformance", "train (6 steps)", "long run (6 steps)", "benchmark",
                         "calls per step")}  # fmt: skip
    want["conformance (shader validation) [objc]"] = "PASS"
    assert rows == want, rows
    assert "Which Metal runtime to trust: trust **objc** (the default)" in summary

    machine = json.loads((out / "machine.json").read_text())
    assert machine["standin"] is True and machine["python"].endswith(sys.version.split()[0])
    assert machine["versions"]["riftco"] and machine["metal"]["available"] is True
    for runtime, facts in machine["runtimes"].items():  # each part ran on the runtime it names
        assert facts["available"] and facts["why"].startswith(f"{runtime} ("), facts
    assert sorted(machine["runtimes"]) == sorted(RUNTIMES)

    for runtime in RUNTIMES:
        _check_runtime(out / runtime, runtime)


def _check_runtime(out: Path, runtime: str) -> None:
    report = json.loads((out / "conformance.json").read_text())
    cases = [c for dev in report["devices"] for c in dev["cases"]]
    assert report["passed"] is True and report["backend"] == "metal"
    assert cases and all(c["status"] == "pass" for c in cases)
    assert report["summary"]["total"] == len(cases)
    assert {c["op"] for c in cases} >= {"softmax", "matmul"}  # the quick subset ran

    log = (out / "train.log").read_text()
    assert log.startswith("$ riftco train --backend metal --steps 6 ")
    assert re.search(r"^model: .* on metal:0$", log, re.M), log
    assert re.search(r"^summary: 6 steps, .* backend metal:0$", log, re.M), log

    bench = json.loads((out / "bench.json").read_text())
    by_name = {r["contender"]: r for r in bench["rows"]}
    mine = ["riftco metal mater", "riftco metal flash"]
    for name in mine + (["riftco native mater"] if runtime == "objc" else []):
        row = by_name[name]
        assert row["n"] == 2 and 0 < row["min_ms"] <= row["median_ms"]
        # untrained, near-uniform logits: the first loss is close to ln(vocab)
        assert abs(row["first_loss"] - math.log(VOCAB)) < 0.1, row
    # every contender matched riftco cpu's first loss (two backends, one model)
    assert bench["reference_first_loss"] and all(r["first_loss_agrees"] for r in bench["rows"])

    calls = json.loads((out / "calls.json").read_text())
    per_step = calls["per_training_step"]
    # counted by the backend's stats and, separately, by wrapping its launch method
    assert per_step["dispatches"] == sum(calls["dispatches_by_kernel"].values()) > 50
    # one wait; two reads: the loss and the device status word (core/kernel_host/status.py)
    assert per_step["host_waits"] == 1 and per_step["downloads"] == 2
    # the objc runtime batches a step into one command buffer; metalcompute makes one each
    want = 1 if runtime == "objc" else per_step["dispatches"]
    assert per_step["command_buffers"] == want, per_step
    assert calls["dispatch_us_pipelined"] > 0 and calls["dispatch_roundtrip_us"] > 0

    (row,) = json.loads((out / "long_run.json").read_text())["rows"]
    assert row["step"] == 6 and row["host_waits"] == 1 and row["runtime"] == runtime
    assert row["command_buffers"] == (1 if runtime == "objc" else row["dispatches"])


@needs_standin
def test_mac_check_quick_on_the_standin(tmp_path):
    out = tmp_path / "mc"
    proc = _run(["--quick", "--out", str(out), "--reference-device", "cpu"], standin=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _check_folder(out)
    bench = json.loads((out / "objc" / "bench.json").read_text())  # references run once
    names = {r["contender"] for r in bench["rows"]}
    for module, contender, label in (("torch", "torch cpu", "PyTorch"), ("mlx", "mlx cpu", "MLX")):
        if _installed(module):  # optional references run when present, else say so
            assert contender in names, (contender, bench["skipped"], bench["failed"])
        else:
            assert any(s.startswith(f"{label}: not installed") for s in bench["skipped"])


def _installed(module: str) -> bool:
    from importlib.util import find_spec

    return find_spec(module) is not None


@pytest.mark.skipif(sys.platform == "darwin", reason="on a Mac metal may really be available")
def test_mac_check_without_metal_fails_and_says_why(tmp_path):
    out = tmp_path / "mc"
    proc = _run(["--quick", "--out", str(out)], standin=False, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = (out / "summary.md").read_text()
    assert "| metal backend | FAIL |" in summary and "macOS-only" in summary
    assert "RIFTCO_METAL_STANDIN=1" in summary  # the reason tells how to run it here
    assert not (out / "conformance.json").exists()  # nothing ran on another backend
    assert json.loads((out / "machine.json").read_text())["metal"]["available"] is False


def test_mac_check_refuses_a_nonempty_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    proc = _run(["--out", str(tmp_path)], standin=False, timeout=120)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def _make() -> str | None:
    return shutil.which("make")


@pytest.mark.skipif(_make() is None, reason="make is not installed")
def test_make_target_runs_the_script():
    proc = subprocess.run(
        [_make(), "-n", "mac-check", "MAC_CHECK_ARGS=--quick --out X"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert ".venv/bin/python bench/mac_check.py --quick --out X" in proc.stdout


@needs_standin
@pytest.mark.skipif(_make() is None, reason="make is not installed")
def test_make_mac_check_on_the_standin(tmp_path):
    """The real target, when the venv is installed (as under `make test`, which CI runs)."""
    fresh = subprocess.run([_make(), "-q", ".venv/.installed"], cwd=ROOT, timeout=60)
    if fresh.returncode != 0:
        pytest.skip("the .venv install stamp is stale: `make mac-check` would reinstall first")
    out = tmp_path / "mc"
    proc = subprocess.run(
        [_make(), "--no-print-directory", "mac-check",
         f"MAC_CHECK_ARGS=--quick --out {out} --reference-device cpu"],
        cwd=ROOT, env=_env(standin=True), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _check_folder(out)
