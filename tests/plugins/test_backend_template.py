"""``riftco new-backend``: the package a third party starts from, used as its CI would.

The template is written to a temporary folder and made visible through its entry point the
way an install does it (a ``dist-info`` folder with the ``entry_points.txt`` its
pyproject.toml declares, on ``PYTHONPATH``; no index, no build backend, no change to this
environment). Then, each in a fresh process: ``riftco.device("cpu")`` must not import the
backend module (the plugin is lazy); ``riftco conformance`` must name every required
method still unwritten; the package's own ``tests/`` folder must run the suite under
pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from riftco.backend import PRIMITIVE_OPS
from riftco.cli import main

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")

NAME = "tplt"


def _install(root: Path, site: Path) -> dict[str, str]:
    """What ``pip install`` leaves for importlib.metadata, from the template's pyproject."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    meta = f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    (info / "METADATA").write_text(meta + "".join(f"Requires-Dist: {d}\n"
                                                  for d in project["dependencies"]))  # fmt: skip
    points = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in table.items())
        for group, table in project["entry-points"].items()
    )
    (info / "entry_points.txt").write_text(points)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(root)])}
    for var in ("RIFTCO_BACKEND", "RIFTCO_DISABLE_PLUGINS", "RIFTCO_STRICT_PLUGINS"):
        env.pop(var, None)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("template") / f"riftco-{NAME}"
    assert main(["new-backend", NAME, str(root)]) == 0
    return root, _install(root, root.parent / "site")


def test_the_template_holds_what_a_package_needs(package: tuple[Path, dict[str, str]]) -> None:
    root, _ = package
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["riftco"] == {NAME: f"riftco_{NAME}.plugin"}
    assert "pytest" in project["project"]["optional-dependencies"]["test"]
    plugin = (root / f"riftco_{NAME}" / "plugin.py").read_text()
    assert f'LazyBackend("{NAME}", "riftco_{NAME}.backend:TpltBackend", priority=-10)' in plugin
    assert (
        "run_case(riftco_conformance_case)" in (root / "tests" / "test_conformance.py").read_text()
    )


def test_importing_riftco_does_not_import_the_backend(package: tuple[Path, dict[str, str]]) -> None:
    root, env = package
    code = (
        "import sys, riftco; riftco.device('cpu'); "
        "print(sorted(riftco.get_registry().entries)); "
        f"print(sorted(m for m in sys.modules if m.startswith('riftco_{NAME}')))"
    )
    proc = _run([sys.executable, "-c", code], env, root.parent)
    assert proc.returncode == 0, proc.stderr
    registered, imported = proc.stdout.splitlines()
    assert f"'{NAME}'" in registered  # found through the entry point...
    assert imported == f"['riftco_{NAME}', 'riftco_{NAME}.plugin']"  # ...but not imported


def test_conformance_names_every_unwritten_method(package: tuple[Path, dict[str, str]]) -> None:
    root, env = package
    report = root.parent / "report.json"
    cmd = [sys.executable, "-m", "riftco.cli", "conformance", NAME, "--ops", "neg",
           "--max-examples", "0", "--json", str(report), "-q"]  # fmt: skip
    proc = _run(cmd, env, root.parent)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cases = {c["id"]: c for c in json.loads(report.read_text())["devices"][0]["cases"]}
    reason = cases["protocol/required_methods"]["reason"]
    listed = reason.split("not implemented yet (only raise NotImplementedError): ")[1]
    assert listed.split(", ") == list(PRIMITIVE_OPS)
    assert "[tplt] from_numpy is not implemented yet" in cases["neg[float32]"]["reason"]
    # write one method: it leaves the list
    backend = root / f"riftco_{NAME}" / "backend.py"
    text = backend.read_text()
    stub = f'raise NotImplementedError("[{NAME}] neg is not implemented yet")'
    backend.write_text(text.replace(stub, "return self.mul_scalar(x, -1.0)"))
    try:
        proc = _run(cmd, env, root.parent)
        reason = json.loads(report.read_text())["devices"][0]["cases"][1]["reason"]
        assert ", neg," not in reason and "pow_scalar, exp," in reason, reason
    finally:
        backend.write_text(text)


def test_the_package_tests_run_conformance_under_pytest(
    package: tuple[Path, dict[str, str]],
) -> None:
    root, env = package
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           "--conformance-ops", "neg", "--conformance-max-examples", "0"]  # fmt: skip
    proc = _run(cmd, env, root)  # in the package: its pyproject passes --backend=tplt
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert f"test_conformance[{NAME}:0/protocol]" in out and "not implemented yet" in out
    assert "4 failed, 1 passed" in out


def test_new_backend_refuses_a_bad_name_and_a_used_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new-backend", "My-Backend", str(tmp_path / "x")]) == 2
    assert "lower-case letters" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert main(["new-backend", "ok", str(tmp_path / "y")]) == 0
    assert main(["new-backend", "ok", str(tmp_path / "y")]) == 2
    assert "already holds pyproject.toml" in capsys.readouterr().err


def test_the_guide_shows_what_the_template_writes(tmp_path: Path) -> None:
    """docs/BACKENDS.md's pytest route and lazy plugin are the template's lines, verbatim."""
    root = tmp_path / "riftco-mine"
    assert main(["new-backend", "mine", str(root)]) == 0
    guide = (Path(__file__).resolve().parents[2] / "docs" / "BACKENDS.md").read_text()
    written = "".join(p.read_text() for p in (root / "pyproject.toml",
                                              root / "tests" / "test_conformance.py",
                                              root / "riftco_mine" / "plugin.py"))  # fmt: skip
    for line in (
        'addopts = ["--backend=mine", "--conformance-max-examples=10"]',
        'test = ["riftco[conformance]", "pytest"]',
        "from riftco.conformance.pytest_plugin import run_case",
        "    run_case(riftco_conformance_case)",
        '    return [riftco.LazyBackend("mine", "riftco_mine.backend:MineBackend", priority=-10)]',
    ):
        assert line in written and line in guide, line
