"""bench/gpu_check.sh, the one-call CUDA device check, cannot pass silently: where
`nvidia-smi -L` lists a GPU and the cuda backend is unavailable (no driver library here, or
an import that breaks) it exits 2 with the reason; where no GPU is listed it skips with
exit 0; its stage limits fit one device call."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
STUB = """#!/bin/sh
if [ "$1" = "-L" ]; then echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000)"; exit 0; fi
echo "NVIDIA H200, 580.00, 143771 MiB, 1980 MHz"
"""


def _run(
    tmp_path: Path, path_dirs: list[Path], pythonpath: str = ""
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFTCO_")}
    env["PATH"] = os.pathsep.join([*map(str, path_dirs), "/usr/bin", "/bin"])
    env["PYTHON"] = sys.executable
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def stub_gpu(tmp_path: Path) -> Path:
    folder = tmp_path / "stub-bin"
    folder.mkdir()
    (folder / "nvidia-smi").write_text(STUB)
    (folder / "nvidia-smi").chmod(0o755)
    return folder


def _cuda_usable() -> bool:
    from riftco.backends.cuda.backend import availability

    return availability()[0]


pytestmark = pytest.mark.skipif(_cuda_usable(), reason="a real GPU is usable here")


def test_listed_gpu_with_unavailable_backend_exits_2(tmp_path: Path, stub_gpu: Path) -> None:
    out = _run(tmp_path, [stub_gpu])
    assert out.returncode == 2, out.stdout + out.stderr
    assert "nvidia-smi lists a GPU but the cuda backend is unavailable" in out.stdout
    assert "python:" in out.stdout and "numpy:" in out.stdout  # versions come first
    assert out.stdout.index("python:") < out.stdout.index("FAILED")


def test_a_broken_import_with_a_listed_gpu_exits_2(tmp_path: Path, stub_gpu: Path) -> None:
    broken = tmp_path / "broken"
    (broken / "cuda").mkdir(parents=True)
    (broken / "cuda" / "__init__.py").write_text("raise ImportError('planted: cuda is broken')\n")
    out = _run(tmp_path, [stub_gpu], pythonpath=str(broken))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "planted: cuda is broken" in out.stdout


def test_no_listed_gpu_skips_with_the_reason(tmp_path: Path) -> None:
    empty = tmp_path / "no-nvidia"
    empty.mkdir()
    out = _run(tmp_path, [empty])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no NVIDIA GPU/driver: skipped (" in out.stdout


def test_stage_limits_fit_one_device_call() -> None:
    text = SCRIPT.read_text()
    limits = [int(n) for n in re.findall(r"^(?:if ! )?stage [\w-]+ (\d+) ", text, re.M)]
    assert len(limits) >= 6, limits
    assert sum(limits) <= 500, limits
    assert "smoke" in re.findall(r"stage ([\w-]+) \d+", text)[:2]  # smoke before the long stages
