"""Pieces of the conformance suite checked on their own: comparison, expectations, plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from riftco.backend import FUSED_OPS, PRIMITIVE_OPS
from riftco.conformance import expectations as ex
from riftco.ops import unit
from riftco.ops.comparison import compare
from riftco.ops.opunit import EXACT, Tolerance


def tolerance(op: str, dtype: str) -> Tolerance:
    return unit(op).tolerance.for_dtype(dtype)


def test_compare_counts_mismatches_and_finds_the_worst() -> None:
    expected = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    got = expected.copy()
    got[0, 1] += 0.5  # relative error 0.25
    got[1, 2] += 3.0  # relative error 0.5, the worst
    c = compare("y", got, expected, Tolerance(1e-6, 1e-6))
    assert not c.ok and c.mismatches == 2
    assert c.max_abs == pytest.approx(3.0) and c.max_rel == pytest.approx(0.5)
    assert c.worst_index == (1, 2) and c.got == 9.0 and c.expected == 6.0
    assert "2 of 6 elements" in c.describe() and "y[1, 2]" in c.describe()


def test_compare_tolerance_is_atol_plus_rtol() -> None:
    e = np.array([100.0, 0.0])
    assert compare("y", e + [0.9e-2 + 0.5e-3, 0.9e-3], e, Tolerance(1e-3, 1e-4)).ok
    assert not compare("y", e + [0.0, 1.1e-3], e, Tolerance(1e-3, 1e-4)).ok
    # accumulating ops scale atol by their input magnitude
    assert compare("y", e + [0.0, 1.1e-3], e, Tolerance(1e-3, 1e-4), atol_scale=2.0).ok


def test_compare_nan_and_inf_must_match_exactly() -> None:
    e = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert compare("y", e.copy(), e, EXACT).ok
    for bad in (
        [0.0, np.inf, -np.inf, 1.0],
        [np.nan, 1e30, -np.inf, 1.0],
        [np.nan, np.inf, -np.inf, np.nan],
    ):
        assert not compare("y", np.array(bad), e, Tolerance(1.0, 1.0)).ok


def test_a_nan_or_inf_mismatch_is_named_as_such_not_as_a_zero_error() -> None:
    """A NaN where the reference is finite has no error number: the message says what it is
    (it used to read "beyond tolerance; max abs err 0, max rel err 0")."""
    e = np.array([0.5, 1.0, np.inf, 2.0])
    only = compare("dx", np.array([np.nan, 1.0, np.inf, 2.0]), e, Tolerance(1e-6, 1e-6))
    text = only.describe()
    assert only.special == 1 and "1 of 4 elements are NaN/Inf mismatches" in text
    assert "max abs err 0" not in text and "got nan, expected 0.5" in text
    both = compare("dx", np.array([0.5, 1.5, -np.inf, 2.0]), e, Tolerance(1e-6, 1e-6))
    text = both.describe()
    assert both.special == 1 and both.mismatches == 2
    assert "2 of 4 elements wrong: 1 NaN/Inf mismatches" in text
    assert "1 beyond tolerance (max abs err 0.5" in text and "got -inf, expected inf" in text


def test_compare_rounds_the_reference_to_the_output_dtype() -> None:
    """exp(100) overflows float32: inf is the right float32 answer, a finite value is not."""
    e = np.array([np.exp(100.0), 1e-50])
    assert compare("y", np.array([np.inf, 0.0], dtype=np.float32), e, EXACT).ok
    assert not compare("y", np.array([3.4e38, 0.0], dtype=np.float32), e, Tolerance(1, 1)).ok
    assert not compare("y", np.array([np.inf, 0.0]), e, Tolerance(1e-6, 1e-6)).ok  # float64


def test_compare_reports_shape_and_dtype_problems() -> None:
    assert "shape" in compare("y", np.zeros(3), np.zeros(4), EXACT).problem
    assert "integer" in compare("i", np.zeros(3), np.zeros(3, dtype=np.int32), EXACT).problem


def test_tolerance_table_covers_every_op_and_is_exact_where_it_must_be() -> None:
    for op in PRIMITIVE_OPS + FUSED_OPS:
        for dt in ("float32", "float64"):
            t = tolerance(op, dt)
            assert t.atol >= 0 and t.rtol >= 0
    assert tolerance("argmax", "float32") == EXACT and tolerance("compare", "float64") == EXACT
    assert tolerance("add", "int32") == EXACT
    # float32 is looser than float64 everywhere it is not exact
    for op in FUSED_OPS:
        assert tolerance(op, "float32").rtol >= tolerance(op, "float64").rtol


def test_glob_treats_brackets_literally() -> None:
    assert ex.glob_match("softmax[float32]", "softmax[float*]")
    assert ex.glob_match("softmax[float32,composite]", "*[float32*")
    assert not ex.glob_match("softmaxf]", "softmax[f]")


def test_expectations_json_and_toml(tmp_path: Path) -> None:
    j = tmp_path / "e.json"
    j.write_text(json.dumps({"cases": {"gelu*": {"status": "skip", "reason": "no erf"}}}))
    t = tmp_path / "e.toml"
    t.write_text('[cases."matmul[float32]"]\nstatus = "xfail"\nreason = "tile bug"\n')
    assert ex.load(j).lookup("gelu[float32]").reason == "no erf"
    loaded = ex.load(t)
    assert loaded.lookup("matmul[float32]").status == "xfail"
    assert loaded.lookup("matmul[float64]") is None
    assert loaded.unmatched() == []


@pytest.mark.parametrize(
    "entry",
    [{"status": "maybe", "reason": "x"}, {"status": "skip"}, {"status": "skip", "reason": " "}],
)
def test_expectations_reject_malformed_entries(tmp_path: Path, entry: dict[str, str]) -> None:
    p = tmp_path / "e.json"
    p.write_text(json.dumps({"cases": {"add[float32]": entry}}))
    with pytest.raises(ex.ExpectationsError, match=r"add\[float32\]"):
        ex.load(p)


def test_expectations_from_class_attribute_resolve_next_to_the_module(tmp_path: Path) -> None:
    class Fake:
        conformance_expectations = str(tmp_path / "x.json")

    (tmp_path / "x.json").write_text(json.dumps({"cases": {}}))
    assert ex.for_backend(Fake, None).source.endswith("x.json")
    assert ex.for_backend(None, None).entries == []


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_pytest_plugin_skips_without_backend_and_runs_with_one() -> None:
    idle = _pytest("--pyargs", "riftco.conformance", "-rs")
    assert idle.returncode == 0, idle.stdout + idle.stderr
    assert "1 skipped" in idle.stdout and "--backend" in idle.stdout
    ran = _pytest(
        "--pyargs", "riftco.conformance", "--backend=cpu", "--conformance-ops=softmax*,errors/*",
        "--conformance-max-examples=1",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert " passed" in ran.stdout and "failed" not in ran.stdout


def test_help_and_a_clear_error_without_hypothesis() -> None:
    """A backend author without the conformance extra gets help and one clear line."""
    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "from riftco.cli import main\n"
        "try:\n    main(['conformance', '--help'])\n"
        "except SystemExit as e:\n    print('help exit', e.code)\n"
        "print('run exit', main(['conformance', 'cpu']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "usage: riftco conformance" in out.stdout and "help exit 0" in out.stdout, out.stderr
    assert "run exit 2" in out.stdout
    assert "pip install 'riftco[conformance]'" in out.stderr and "Traceback" not in out.stderr


def test_conformance_extra_declares_hypothesis() -> None:
    import tomllib

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    extra = meta["project"]["optional-dependencies"]["conformance"]
    assert any(req.startswith("hypothesis") for req in extra)


def test_dtypes_option_checks_only_those_dtypes(tmp_path, capsys):
    from riftco.conformance import cli

    out = tmp_path / "r.json"
    assert cli.main(["cpu", "--dtypes", "float32", "--ops", "exp*,softmax", "--json", str(out),
                     "--quiet"]) == 0  # fmt: skip
    report = json.loads(out.read_text())
    ids = [c["id"] for d in report["devices"] for c in d["cases"]]
    assert "exp[float32]" in ids and any(i.startswith("softmax[float32") for i in ids)
    assert not any("float64" in i for i in ids), ids
    assert report["settings"]["dtypes"] == ["float32"]
    assert cli.main(["cpu", "--dtypes", "int32", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--dtypes int32: cpu:0 has float dtypes bfloat16, float16, float32, float64" in err


def test_model_checks_run_in_the_dtypes_a_backend_declares(registry, tmp_path: Path) -> None:
    """float64 and int64 only (no float32, no int32): the model and training checks run in
    those (the model's positions take the ids' dtype) instead of erroring; a backend with no
    float32 or float64 skips them with the reason."""
    from helpers import plugin_for
    from riftco.backends.cpu.backend import CPUBackend
    from riftco.conformance import cli

    class Wide(CPUBackend):
        name = "wide"
        dtypes = frozenset({np.dtype(np.float64), np.dtype(np.int64)})

    class Half(CPUBackend):
        name = "half"
        dtypes = frozenset({np.dtype(np.float16), np.dtype(np.int32)})

    registry.register(plugin_for(Wide, Half), name="dtype-backends")
    out = tmp_path / "r.json"
    for name, status in (("wide", "pass"), ("half", "skip")):
        cli.main([name, "--ops", "*tiny_transformer*", "--json", str(out), "--quiet"])
        cases = {c["id"]: c for d in json.loads(out.read_text())["devices"] for c in d["cases"]}
        model = [c for cid, c in cases.items() if "tiny_transformer" in cid]
        assert len(model) == 3 and all(c["status"] == status for c in model), model
        if status == "pass":
            assert all(c["dtype"] == "float64" for c in model)
        else:
            assert all("float32 or float64; float16, int32 declared" in c["reason"] for c in model)
