"""The built wheel ships every file of the source packages: kernels, headers, stubs, C.

An editable install reads straight from the tree, so a file missing from the package data
only shows up after ``pip install riftco`` from a wheel. This builds one (a copy of the
tree, so the repository gets no ``build/`` folder) and checks it file by file against the
folders ``[tool.setuptools] package-dir`` maps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml needs tomli on 3.10")

ROOT = Path(__file__).resolve().parents[2]
SKIP_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache"}
SKIP_SUFFIXES = {".pyc", ".pyo", ".so", ".pyd", ".dylib"}  # build outputs, not sources


def _setuptools_major() -> int:
    try:
        from importlib.metadata import version

        return int(version("setuptools").split(".")[0])
    except Exception:
        return 0


def _build_wheel(src: Path, out: Path) -> Path:
    """``pip wheel`` offline with this environment's setuptools when it is new enough for
    pyproject's ``build-system.requires``, else in pip's isolated build environment."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    need = next(r for r in config["build-system"]["requires"] if r.startswith("setuptools"))
    wanted = int(re.search(r">=\s*(\d+)", need).group(1)) if ">=" in need else 0
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(src)]
    if _setuptools_major() >= wanted:
        cmd.insert(4, "--no-build-isolation")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        log = proc.stdout + proc.stderr
        if "--no-build-isolation" not in cmd and re.search(
            r"No matching distribution found for (setuptools|wheel)|Could not fetch URL", log
        ):
            pytest.skip(f"no setuptools new enough here and no package index: {need}")
        pytest.fail(f"pip wheel failed ({proc.returncode}):\n{log[-4000:]}")
    (wheel,) = out.glob("riftco-*.whl")
    return wheel


def _source_files(package_dir: dict[str, str]) -> dict[str, Path]:
    """Every file under the mapped folders, keyed by its path inside the wheel."""
    files = {}
    for package, folder in package_dir.items():
        base = ROOT / folder
        prefix = package.replace(".", "/")
        for path in base.rglob("*"):
            rel = path.relative_to(base)
            if not path.is_file() or path.suffix in SKIP_SUFFIXES:
                continue
            if SKIP_PARTS & set(rel.parts) or any(p.startswith(".") for p in rel.parts):
                continue
            files.setdefault(f"{prefix}/{rel.as_posix()}", path)
    return files


@pytest.fixture(scope="module")
def wheel_and_config(tmp_path_factory):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package_dir = config["tool"]["setuptools"]["package-dir"]
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "build", "*.egg-info")
    for folder in set(package_dir.values()):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    wheel = _build_wheel(src, tmp_path_factory.mktemp("wheel"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    return names, package_dir, wheel


def test_wheel_holds_every_shader_header_and_stub(wheel_and_config):
    names, _, _ = wheel_and_config
    shaders = sorted(
        p for p in (ROOT / "shaders").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    kinds = {p.suffix for p in shaders}
    assert {".cl", ".h"} <= kinds and any("stubs" in p.parts for p in shaders)  # a real listing
    missing = [
        str(p.relative_to(ROOT))
        for p in shaders
        if f"riftco/shaders/{p.relative_to(ROOT / 'shaders').as_posix()}" not in names
    ]
    assert not missing, f"shader files missing from the wheel: {missing}"


def test_wheel_holds_every_source_file(wheel_and_config):
    names, package_dir, _ = wheel_and_config
    files = _source_files(package_dir)
    missing = sorted(str(path.relative_to(ROOT)) for key, path in files.items() if key not in names)
    assert not missing, f"files under {sorted(set(package_dir.values()))} missing: {missing}"
    assert "riftco/data/tinyshakespeare.txt" in names  # the default corpus ships
    assert "riftco/backends/native/kernels.c" in names
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]


_WHERE_EVERY_OP = """
import json
from pathlib import Path
from riftco import op_locations
from riftco.ops.opunit import units
missing = [f"{u.name}: {loc}" for u in units()
           for loc in op_locations.locations(op_locations.where(u.name))
           if not (op_locations.root() / loc.path).is_file()]
import contextlib, io
from riftco.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    main(["ops"])
listed = [line.split()[-1] for line in out.getvalue().splitlines()[1:]]
missing += [p for p in listed if not (op_locations.root() / p).is_file()]
w = op_locations.where("layer_norm")
print(json.dumps({"root": str(op_locations.root()), "kind": op_locations.root_kind(),
                  "unit": w.unit.path, "tests": len(w.tests), "missing": missing}))
"""


def test_ops_where_prints_paths_that_exist_in_the_installed_wheel(wheel_and_config, tmp_path):
    """Installed from the wheel, ``riftco ops --where`` answers relative to the installed
    package (``ops/fused/...``, ``backends/...``), not to a source tree it does not have."""
    _, _, wheel = wheel_and_config
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path)  # ahead of the editable install's finder
    proc = subprocess.run([sys.executable, "-c", _WHERE_EVERY_OP], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["root"] == str(tmp_path / "riftco") and got["kind"] == "installed package"
    assert got["unit"] == "ops/fused/layer_norm.py" and got["tests"] == 0
    assert got["missing"] == []
