"""Conformance samples are test data: ``import riftco`` must not load them.

Each op unit's samples, error samples and domain samples live in a sibling module
``<package>/_samples/<module>.py`` that ``OpUnit.sample_set`` imports on first use (the
way PyTorch keeps OpInfo's sample inputs in its testing code). These tests hold the
convention: nothing of it loads with the runtime, every unit that names a samples module
finds its entry there, and every op module has its samples module and no other.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

from riftco.ops import fused, primitive
from riftco.ops.opunit import samples_module, units


def test_import_riftco_loads_no_samples_module() -> None:
    code = (
        "import json, sys, riftco, riftco.ops, riftco.backend, riftco.autograd\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('riftco'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "riftco.ops" in loaded  # the runtime did load
    test_data = [m for m in loaded if "._samples" in m or m == "riftco.ops.samples"]
    assert test_data == [], f"import riftco loaded test data: {test_data}"


def test_every_in_tree_unit_reads_its_samples_module() -> None:
    for u in units():
        if u.testing is None:
            continue
        assert isinstance(u.testing, str), u.name
        assert u.testing == samples_module(u.method.__module__), u.name
        assert u.sample_set() is not None, u.name  # raises when SAMPLES has no entry


def test_samples_modules_mirror_the_op_modules() -> None:
    for package in (primitive, fused):
        ops_modules = {m.name for m in pkgutil.iter_modules(package.__path__)} - {"_samples"}
        sample_pkg = f"{package.__name__}._samples"
        samples_path = [p + "/_samples" for p in package.__path__]
        sample_modules = {m.name for m in pkgutil.iter_modules(samples_path)}
        assert sample_modules == ops_modules, sample_pkg
        for name in sample_modules:  # each holds entries only for its own op module's units
            module = __import__(f"{sample_pkg}.{name}", fromlist=["SAMPLES"])
            mine = {u.name for u in units() if u.testing == f"{sample_pkg}.{name}"}
            assert set(module.SAMPLES) == mine, f"{sample_pkg}.{name}"
