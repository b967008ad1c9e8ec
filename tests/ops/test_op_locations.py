"""``riftco ops --where NAME``: every path it prints exists, for every op, and what it says
is read from the code (a backend registered at run time shows up as it is written)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import plugin_for
from riftco import op_locations
from riftco.backends.cpu.backend import CPUBackend
from riftco.cli import main
from riftco.ops.opunit import units

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def answers() -> dict[str, op_locations.Where]:
    return {u.name: op_locations.where(u.name) for u in units()}


def test_the_root_is_where_riftco_is_installed() -> None:
    # the tests run against the editable install: its root is this source tree
    assert op_locations.root() == REPO
    assert op_locations.root_kind().startswith("source tree")


def test_every_path_printed_exists_for_every_op(answers: dict[str, Any]) -> None:
    missing = []
    for name, w in answers.items():
        for loc in op_locations.locations(w):
            path = op_locations.root() / loc.path
            if not path.is_file():
                missing.append(f"{name}: {loc}")
            elif loc.line is not None:
                lines = path.read_text(encoding="utf-8").splitlines()
                if not 1 <= loc.line <= len(lines):
                    missing.append(f"{name}: {loc} (past the end)")
    assert missing == []


def test_lines_point_at_what_they_name(answers: dict[str, Any]) -> None:
    """A kernel's line holds its name (written out or in the macro call that makes it), a
    C symbol's line its ``F(name)``, a unit's line its assignment."""
    wrong = []
    for name, w in answers.items():
        text = (op_locations.root() / w.unit.path).read_text(encoding="utf-8").splitlines()
        if not text[w.unit.line - 1].startswith(f"{w.unit.name} = "):
            wrong.append(f"{name}: unit at {w.unit}")
        for b in w.backends:
            for loc in b.code:
                got = (op_locations.root() / loc.path).read_text(encoding="utf-8").splitlines()
                line = got[loc.line - 1]
                symbol = loc.name.split("_f32")[0]
                if loc.path.endswith(".c"):
                    ok = f"F({symbol})(" in line
                elif loc.path.endswith(".cl"):
                    ok = symbol in line or any(
                        part in line for part in symbol.split("_") if len(part) > 2
                    )
                else:  # cpu math helper
                    ok = f"def {loc.name}(" in line
                if not ok:
                    wrong.append(f"{name} on {b.backend}: {loc} -> {line.strip()!r}")
    assert wrong == []


def test_every_op_answers_with_its_pieces(answers: dict[str, Any]) -> None:
    for name, w in answers.items():
        by = {b.backend: b for b in w.backends}
        assert by["cpu"].mode == "native", name  # the reference defines every op
        assert by["cpu"].method.path.startswith("backends/cpu/"), name
        if w.kind == "fused":
            assert w.composite is not None and w.samples is not None, name
            assert w.tests, name


def test_layer_norm_leads_to_its_c_function_and_its_shader_kernels(answers: dict[str, Any]) -> None:
    w = answers["layer_norm_backward"]
    by = {b.backend: b for b in w.backends}
    # the float kernels, and (half operands) the worker they share with add_layer_norm's
    names = {c.name: c.path for c in by["native"].code}
    assert names["layer_norm_backward_f32, layer_norm_backward_f64"] == "backends/native/kernels.c"
    assert set(names) <= {
        "layer_norm_backward_f32, layer_norm_backward_f64",
        "add_layer_norm_backward_f32, add_layer_norm_backward_f64",
    }
    kernels = {c.name for c in by["opencl"].code}
    assert kernels == {"layer_norm_backward_dx", "layer_norm_backward_partial",
                       "layer_norm_backward_params"}  # fmt: skip
    assert by["opencl"].method.path == "core/kernel_host/fused_layer_norm.py"
    assert by["cpu"].code[0].name == "_layer_norm_backward_math"
    assert w.vjp is not None and "of layer_norm" in w.vjp.name
    assert {m.name for m in answers["layer_norm"].mutants} >= {"LayerNormNaiveVariance"}
    assert [c.name for c in {b.backend: b for b in answers["exp"].backends}["opencl"].code] == [
        "unary_exp"
    ]  # a macro-made kernel, picked from the f-string "unary_{op}"


def test_a_backend_registered_at_run_time_is_read_from_its_code(registry: Any) -> None:
    class HalfNative(CPUBackend):
        name = "halfnative"

        def gelu(self, x: Any, approximate: str) -> Any:
            return super().gelu(x, approximate)

    del_gelu_backward = type("NoGeluBackward", (HalfNative,), {"gelu_backward": None})
    registry.register(plugin_for(del_gelu_backward), name="half")
    w = op_locations.where("gelu")
    mine = {b.backend: b for b in w.backends}["halfnative"]
    assert mine.mode == "native" and mine.method.name.endswith("HalfNative.gelu")
    assert mine.method.path == "tests/ops/test_op_locations.py"
    back = {b.backend: b for b in op_locations.where("gelu_backward").backends}["halfnative"]
    assert back.mode == "composite"


def test_cli_prints_the_root_and_json(capsys: Any) -> None:
    assert main(["ops", "--where", "softmax"]) == 0
    out = capsys.readouterr().out
    assert f"root: {REPO}" in out
    assert re.search(r"unit +core/ops/fused/softmax\.py:\d+ \(SOFTMAX\)", out)
    assert main(["ops", "--where", "softmax", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["op"] == "softmax" and data["root"] == str(REPO)
    assert {b["backend"] for b in data["backends"]} >= {"cpu", "native", "opencl"}


def test_cli_unknown_op_suggests_names(capsys: Any) -> None:
    assert main(["ops", "--where", "layernorm"]) == 2
    err = capsys.readouterr().err
    assert "no op named 'layernorm'" in err and "layer_norm" in err
    assert main(["ops", "--where"]) == 2


def test_ops_listing_prints_the_root_and_paths_that_exist(capsys: Any) -> None:
    assert main(["ops"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"root: {REPO}")
    paths = [line.split()[-1] for line in lines[1:]]
    assert len(paths) == len(units())
    assert [p for p in paths if not (op_locations.root() / p).is_file()] == []
