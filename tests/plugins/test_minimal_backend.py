"""The minimal backend docs/BACKENDS.md teaches from passes the conformance suite.

It is a file in examples/, not a snippet: this test imports it, registers it as a plugin
and runs ``riftco conformance`` on it, so the documented example cannot rot.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from riftco.conformance import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "minimal_backend" / "minimal_backend.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("minimal_backend", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_minimal_backend_passes_conformance(registry: Any, tmp_path: Path) -> None:
    registry.register(_load(), name="minimal")
    out = tmp_path / "r.json"
    rc = cli.main(["minimal", "--max-examples", "3", "--quiet", "--json", str(out)])
    report = json.loads(out.read_text())
    bad = [c for d in report["devices"] for c in d["cases"] if c["status"] not in ("pass",)]
    assert rc == 0, [(c["id"], c["reason"][:300]) for c in bad]
    cases = [c for d in report["devices"] for c in d["cases"] if c["group"] == "numeric"]
    modes = {c["mode"] for c in cases if c["op"] == "softmax"}
    assert modes == {"composite"}  # nothing fused: core's composites ran on its primitives


def test_backends_md_quotes_the_example_file() -> None:
    """The guide's code is the file's code (the class header and the plugin hook)."""
    doc = (ROOT / "docs" / "BACKENDS.md").read_text(encoding="utf-8")
    source = EXAMPLE.read_text(encoding="utf-8")
    for block in re.findall(
        r"```python\n# examples/minimal_backend/minimal_backend.py\n(.*?)```", doc, re.S
    ):
        assert block.strip() in source
    assert "examples/minimal_backend/minimal_backend.py" in doc
