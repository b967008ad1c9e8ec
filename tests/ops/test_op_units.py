"""The op-unit registry: every op's facts in one place, read by everything else.

These tests hold the registry to its promise: each unit is complete (method, semantics,
checks, samples or a reason, tolerance, derivative where differentiable), the protocol
classes are built from the units, and the docs table is generated from them.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
import riftco
from riftco import ops
from riftco.backend import FUSED_OPS, PRIMITIVE_OPS, Backend, FusedBackend
from riftco.ops.opunit import OpUnit, units
from riftco.ops.table import BEGIN, END, embed

ROOT = Path(__file__).resolve().parents[2]
NO_SAMPLES = {"allocate", "from_numpy", "synchronize", "memory_stats"}  # read by every case


@pytest.mark.parametrize("unit", units(), ids=lambda u: u.name)
def test_every_unit_is_complete(unit: OpUnit) -> None:
    assert unit.summary, f"{unit.name}: the protocol method needs a docstring"
    assert unit.kind in ("memory", "primitive", "fused")
    assert unit.method.__name__ == unit.name
    if unit.name not in NO_SAMPLES:
        assert unit.samples is not None and unit.samples.edges, unit.name
        assert unit.samples.bench is not None and unit.cost is not None, unit.name
    if unit.fused:
        assert unit.composite is not None, f"{unit.name}: a fused op needs its composite"
    if unit.differentiable:
        assert unit.vjp is not None
    for dt in ("float32", "float64"):
        tol = unit.tolerance.for_dtype(dt)
        assert tol.atol >= 0 and tol.rtol >= 0
    f32, f64 = unit.tolerance.for_dtype("float32"), unit.tolerance.for_dtype("float64")
    assert f32.rtol >= f64.rtol and f32.atol >= f64.atol  # float32 never tighter


def test_the_protocol_is_the_units() -> None:
    required = [u.name for u in units() if not u.fused]
    fused = [u.name for u in units() if u.fused]
    assert list(PRIMITIVE_OPS) == required and list(FUSED_OPS) == fused
    for name in required:
        assert callable(getattr(Backend, name, None)), name
    for name in fused:  # FusedBackend lists every fused unit's Methods class
        assert callable(getattr(FusedBackend, name, None)), f"add {name}'s Methods to FusedBackend"
    from riftco.backends.cpu.backend import CPUBackend

    assert riftco.backend.missing_primitives(CPUBackend) == []


def test_public_functions_are_the_units_functions() -> None:
    for u in units():
        if u.function is not None and hasattr(ops, u.name):
            assert getattr(ops, u.name) is u.function, u.name


def test_a_new_unit_is_dispatched_tested_and_listed_without_other_edits(registry) -> None:
    """What docs/BACKENDS.md section 8 promises, done at runtime with a toy op."""
    from riftco.ops.dispatch import Out, dispatch
    from riftco.ops.samples import Arr, Example, Samples, SampleSet, edges

    class SquareMethods:
        def square(self, x):  # noqa: ANN001, ANN201 - a toy protocol method
            """``x * x``."""

    def square(x):  # noqa: ANN001, ANN202
        return dispatch(SQUARE, x.backend, (x,), Out(x.shape, x.dtype))

    SQUARE = OpUnit(  # noqa: N806
        "square", "fused", SquareMethods.square, module="square", function=square,
        composite=lambda x: ops.mul(x, x),
        testing=SampleSet(Samples(lambda p, c: Example("x", [Arr(np.arange(5.0) - 2)]),
                                  edges({}))),
    )  # fmt: skip
    from riftco.ops import opunit as unit_module

    ops.register(SQUARE)
    try:
        assert ops.square is square  # found through riftco.ops
        x = riftco.tensor([1.0, -3.0])
        assert ops.square(x).tolist() == [1.0, 9.0]  # composite on cpu
        assert "square" in riftco.get_registry().entry("cpu").as_dict()["capabilities"]["fused"]
        assert "square(x)" in ops.table.markdown()
        from riftco.conformance import cli

        assert cli.main(["cpu", "--ops", "square", "-q"]) == 0  # its samples ran
    finally:
        del unit_module._UNITS["square"]


def test_docs_op_table_is_generated_from_the_registry() -> None:
    doc = (ROOT / "docs" / "BACKENDS.md").read_text(encoding="utf-8")
    assert BEGIN in doc and END in doc
    assert embed(doc) == doc, "regenerate: python -m riftco.ops.table --write docs/BACKENDS.md"


def test_each_family_lives_in_the_file_the_docs_name() -> None:
    for u in units():
        module = inspect.getmodule(u.method)
        assert module is not None
        rel = Path(inspect.getfile(module)).resolve().relative_to(ROOT).as_posix()
        assert rel == ops.table.module_path(u), (u.name, rel)
