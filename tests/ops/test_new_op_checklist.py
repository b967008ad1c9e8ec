"""The checklist of a new op (docs/BACKENDS.md section 8), enforced at once.

One test reads every registered op unit and names *every* missing piece in one failure,
op by op, with the file to edit: a newcomer adding an op runs this file and gets the whole
list, not one assertion per run. The pieces are what the rest of the suite and the tools
rely on: samples (with edges, a draw, a bench example and error samples), a composite and
a cost model, the cpu reference, a row in the docs table, a mutant of its op module, its place
in autograd, the protocol version that added it, and the few lists kept by hand because
type checkers and readers must see them statically (``riftco.ops``' imports, the
packages' ``MODULES``, the bases of ``Backend`` / ``FusedBackend``, the
device status table).
"""

from __future__ import annotations

import pkgutil
import sys
from pathlib import Path
from typing import Any

import riftco
import riftco.autograd
from riftco import op_locations, ops
from riftco.backend import PROTOCOL_VERSION, Backend, FusedBackend
from riftco.backends.cpu.backend import CPUBackend
from riftco.ops import fused, primitive
from riftco.ops.opunit import OpUnit, units
from riftco.ops.table import markdown

REPO = Path(__file__).resolve().parents[2]

#: The optional methods of protocol 1.0, which is released and never changes: a fused unit
#: that claims ``since=(1, 0)`` without being one of them forgot its ``since``.
PROTOCOL_1_0_FUSED = frozenset({
    "gelu", "gelu_backward", "softmax", "softmax_backward", "layer_norm",
    "layer_norm_backward", "embedding", "embedding_backward", "cross_entropy",
    "cross_entropy_backward", "attention", "attention_backward", "flash_attention",
    "flash_attention_backward", "adam_update",
})  # fmt: skip


def _methods_class(u: OpUnit) -> type:
    owner = u.method.__qualname__.rpartition(".")[0]
    return getattr(sys.modules[u.method.__module__], owner)


def _short_module(u: OpUnit) -> str:
    return u.method.__module__.rpartition(".")[2]


def _mutant_families() -> set[str]:
    return {u.module for u in units() if op_locations.mutants(u.name)}


def missing_pieces(u: OpUnit, context: dict[str, Any]) -> list[str]:
    """What ``u`` still lacks, each as "what (where to add it)"."""
    out: list[str] = []
    module = f"core/ops/{'fused' if u.fused else 'primitive'}/{_short_module(u)}.py"
    samples_file = f"core/ops/{'fused' if u.fused else 'primitive'}/_samples/{_short_module(u)}.py"
    data, loaded = None, True
    try:
        data = u.sample_set()
    except (ImportError, KeyError) as exc:
        loaded = False
        if u.fused:
            out.append(f"samples: {samples_file} with SAMPLES[{u.name!r}] ({exc})")
    if u.fused:
        if loaded and data is None:
            out.append(f"samples: testing=samples_module(__name__) in {module}")
        s = data.samples if data is not None else None
        if data is not None and s is None:
            out.append(f"samples: a Samples in SAMPLES[{u.name!r}] of {samples_file}")
        if s is not None:
            if not s.edges:
                out.append(f"edge samples (smp.edges(...) in {samples_file})")
            if s.draw is None:
                out.append(f"a draw(d) for hypothesis ({samples_file})")
            if s.bench is None:
                out.append(f"a bench example (Samples(bench=...) in {samples_file})")
        if data is not None and not data.errors:
            out.append(f"error samples (SampleSet(errors=...) in {samples_file})")
        if u.composite is None:
            out.append(f"a composite from primitives (OpUnit(composite=...) in {module})")
        if u.cost is None:
            out.append(f"a cost model for the throughput row (OpUnit(cost=...) in {module})")
        if u.since == (1, 0) and u.name not in PROTOCOL_1_0_FUSED:
            out.append(f"since=(1, minor) in {module}: the protocol version that adds it")
        if u.module not in context["mutant_families"]:
            out.append(f"a mutant of op module {u.module!r} (tests/conformance_mutants.py MUTANTS)")
        recorded, vjp = op_locations.autograd_of(u)
        if u.vjp is not None and not recorded:
            out.append(f"autograd: a function in core/autograd/fused.py that applies {u.name}")
        elif u.vjp is None and not (recorded or vjp or u.in_place):
            out.append(f"autograd: a vjp in {module} (or a forward's VJP that calls {u.name})")
        for fn in recorded:
            name = fn.name.removeprefix("riftco.autograd ")
            if name not in riftco.autograd.__all__:
                out.append(f"import {name} in core/autograd/__init__.py (__all__ follows)")
        bases = context["fused_bases"]
    else:
        bases = context["required_bases"]
    if not callable(getattr(CPUBackend, u.name, None)):
        where = "backends/cpu/fused.py (FusedOps)" if u.fused else "backends/cpu/backend.py"
        out.append(f"the cpu reference: a method {u.name} in {where}")
    rows = context["table_rows"]
    if rows is not None and (u.name not in rows or rows[u.name] not in context["docs"]):
        out.append(
            "its row in docs/BACKENDS.md (python -m riftco.ops.table --write docs/BACKENDS.md)"
        )
    if u.function is not None:
        name = u.function.__name__
        if name not in ops.__all__ or vars(ops).get(name) is not u.function:
            out.append(f"import {name} in core/ops/__init__.py (__all__ follows the imports)")
    package = fused if u.fused else primitive
    if _short_module(u) not in package.MODULES:
        out.append(
            f"{_short_module(u)!r} in MODULES of core/ops/{package.__name__[11:]}/__init__.py"
        )
    methods = _methods_class(u)
    if methods not in bases:
        protocol = "FusedBackend" if u.fused else "Backend"
        out.append(f"{methods.__name__} in {protocol}'s bases (core/backend.py)")
    if _domain(u) and u.name not in context["status_ops"]:
        out.append(f"{u.name!r} in STATUS_OPS (core/kernel_host/status.py): it takes ids")
    return out


def _context() -> dict[str, Any]:
    from riftco.kernel_host.status import STATUS_OPS

    try:  # the table reads every unit's samples: one missing module stops it
        rows = markdown().splitlines()[2:]
        table_rows: dict[str, str] | None = {u.name: rows[i] for i, u in enumerate(units())}
    except (ImportError, KeyError):
        table_rows = None
    return {
        "mutant_families": _mutant_families(),
        "fused_bases": set(FusedBackend.__bases__),
        "required_bases": set(Backend.__bases__),
        "status_ops": set(STATUS_OPS),
        "table_rows": table_rows,
        "docs": (REPO / "docs" / "BACKENDS.md").read_text(encoding="utf-8"),
    }


def _domain(u: OpUnit) -> tuple[Any, ...]:
    try:
        return u.domain
    except (ImportError, KeyError):  # reported as missing samples
        return ()


def stale_entries() -> list[str]:
    """Hand-kept entries that name no registered unit (the other direction of the lists)."""
    from riftco.kernel_host.status import STATUS_OPS

    out: list[str] = []
    functions = {u.function for u in units() if u.function is not None}
    api = {"OpUnit", "Out", "register", "unit", "units", "is_native", "composite",
           "same_backend", "flush_deferred", "COMPARE_OPS"}  # fmt: skip
    for name in ops.__all__:
        fn = getattr(ops, name, None)
        module = getattr(fn, "__module__", "")
        if name not in api and not module.startswith(
            ("riftco.ops.primitive.", "riftco.ops.fused.")
        ):
            out.append(f"riftco.ops.__all__ names {name}, which is no op function")
        if fn in functions and fn.__name__ != name:
            out.append(f"riftco.ops exports {fn.__name__} under another name, {name}")
    for package, kinds in ((primitive, ("memory", "primitive")), (fused, ("fused",))):
        found = {
            m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")
        }
        order: list[str] = []
        for u in units():
            if u.kind in kinds and _short_module(u) not in order:
                order.append(_short_module(u))
        listed = [m for m in package.MODULES if m in found]
        if listed != [m for m in order if m in package.MODULES]:
            out.append(f"{package.__name__}.MODULES is not in registration order: {order}")
        out += [
            f"{package.__name__}.MODULES lists {m}, which is no module"
            for m in set(package.MODULES) - found
        ]
    for protocol, fused_kind in ((Backend, False), (FusedBackend, True)):
        want = {_methods_class(u) for u in units() if u.fused == fused_kind}
        extra = [
            b.__name__
            for b in protocol.__bases__
            if b.__name__.endswith("Methods") and b not in want
        ]
        out += [f"{protocol.__name__}'s bases name {b}, which no unit declares" for b in extra]
    index_taking = {u.name for u in units() if _domain(u)}
    out += [
        f"STATUS_OPS lists {op}, which has no domain samples"
        for op in set(STATUS_OPS) - index_taking
    ]
    newest = max(u.since for u in units())
    if PROTOCOL_VERSION < newest:  # later than every unit: a change that adds no method
        out.append(f"PROTOCOL_VERSION (core/backend.py) is {PROTOCOL_VERSION}; the newest "
                   f"unit's since is {newest}")  # fmt: skip
    return out


def test_every_op_has_every_piece_of_the_checklist() -> None:
    context = _context()
    report = []
    for u in units():
        for piece in missing_pieces(u, context):
            report.append(f"{u.name}: {piece}")
    if context["table_rows"] is None:
        report.append("the docs table cannot be built until every unit's samples load")
    report += stale_entries()
    assert not report, "the new-op checklist (docs/BACKENDS.md section 8):\n" + "\n".join(report)


def test_the_checklist_names_every_missing_piece_of_a_bare_unit() -> None:
    """A fused unit with nothing but its method: every piece is reported, in one list."""
    from riftco.ops.fused.softmax import SoftmaxMethods

    bare = OpUnit("bare_norm", "fused", SoftmaxMethods.softmax, module="bare_norm")
    got = "\n".join(missing_pieces(bare, _context()))
    for piece in ("samples", "a composite", "a cost model", "since=(1, minor)",
                  "a mutant of op module 'bare_norm'", "autograd", "the cpu reference",
                  "docs/BACKENDS.md"):  # fmt: skip
        assert piece in got, (piece, got)
