"""Where one op lives: ``riftco ops --where NAME`` (and ``--json``).

Following an op from its unit to the code that runs used to take a reader through a dozen
files: dispatch, the autograd wrapper, the cpu reference, a C symbol built from an f-string
in a unity build, a launch plan, a shader whose kernels are named by strings. This module
answers that in one place, and derives every answer from the registry and from the
backends' own code (their classes, the strings their methods pass to the C library or to
``launch``, the ``KERNEL`` lines of ``shaders/``), never from a table kept by hand, so it
cannot drift from what runs.

Paths are relative to one root, said in the output: the source tree for an editable
install (``core/ops/...``, ``backends/...``), the installed ``riftco`` package otherwise
(``ops/...``, ``backends/...``); every path printed exists under it
(``tests/ops/test_op_locations.py``). Tests and mutants are in the repository only: they are
listed when the root is a source tree.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .code_index import (
    Loc,
    c_symbols,
    defined_under,
    loc_of,
    matching,
    package_dir,
    parse_source,
    rel,
    root,
    root_kind,
    shader_kernels,
    strings_reached,
)
from .ops.opunit import OpUnit, unit, units


@dataclass
class BackendImpl:
    """How one backend runs the op: ``native`` (its own method), or ``composite``."""

    backend: str
    mode: str
    method: Loc | None = None
    #: the cpu reference's math helpers, native C symbols, or shader kernels it reaches
    code: list[Loc] = field(default_factory=list)
    note: str = ""


@dataclass
class Where:
    op: str
    kind: str
    module: str
    root: str
    root_kind: str
    unit: Loc
    function: Loc | None
    composite: Loc | None
    samples: Loc | None
    autograd: list[Loc]
    vjp: Loc | None
    tolerance: dict[str, Any]
    backends: list[BackendImpl]
    mutants: list[Loc]
    tests: list[Loc]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- one backend ------------------------------------------------------------------------------
def _is_kernel_backend(cls: type) -> bool:
    from .kernel_host.backend import KernelBackend

    return issubclass(cls, KernelBackend)


def _defining_class(cls: type, name: str) -> type | None:
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def implementation(backend: str, cls: type, u: OpUnit) -> BackendImpl:
    """How backend class ``cls`` runs ``u``: its method, and the code that method reaches
    (cpu math helpers, native C functions, a launch plan's shader kernels)."""
    owner = _defining_class(cls, u.name)
    fn = getattr(cls, u.name, None)
    if owner is None or not callable(fn):
        return BackendImpl(backend, "composite", note="core's composite, from its primitives")
    method = loc_of(fn, f"{owner.__qualname__}.{u.name}")
    folder = Path(inspect.getsourcefile(owner) or ".").resolve().parent
    literals, patterns = strings_reached(fn, cls, (root(), folder))
    impl = BackendImpl(backend, "native", method)
    cpu = package_dir("riftco.backends") / "cpu"
    if folder == cpu:
        impl.code = _helpers(fn, cpu)
        own = cls.__module__.startswith("riftco.backends.cpu")
        impl.note = "the reference (numpy)" if own else "inherited from the cpu reference"
    elif _is_kernel_backend(cls):
        impl.code = matching(shader_kernels(), literals, patterns, u.name)
        impl.note = "launch plan: shaders/ kernels" if impl.code else "host side, no kernel"
    elif c_symbols(folder):
        impl.code = matching(c_symbols(folder), literals, patterns, u.name)
        impl.note = "C kernels" if impl.code else "numpy in the method itself"
    return impl


def _helpers(fn: Any, folder: Path) -> list[Loc]:
    """Module-level functions under ``folder`` that ``fn`` calls (the math it is made of)."""
    tree = parse_source(fn)
    if tree is None:
        return []
    scope = getattr(inspect.unwrap(fn), "__globals__", {})
    out: list[Loc] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            callee = scope.get(node.func.id)
            plumbing = node.func.id in ("_v", "view")  # a tensor's numpy view, not math
            if inspect.isfunction(callee) and defined_under(callee, folder) and not plumbing:
                loc = loc_of(callee, node.func.id)
                if loc is not None and loc not in out:
                    out.append(loc)
    return out


def backend_classes() -> dict[str, type]:
    """Every registered backend class by name (none is instantiated or probed)."""
    from .plugins import get_registry

    return {n: e.cls for n, e in get_registry().entries.items() if e.cls is not None}


# -- the unit's own pieces ---------------------------------------------------------------------
def _unit_var(u: OpUnit) -> tuple[str, Any] | None:
    module = importlib.import_module(u.method.__module__)
    for key, value in vars(module).items():
        if value is u:
            return key, module
    return None


def _assignment_line(path: str, var: str) -> int | None:
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == var for t in node.targets
        ):
            return node.lineno
    return None


def _autograd(u: OpUnit, var: str | None) -> list[Loc]:
    """Functions of ``riftco.autograd`` that record ``u``: ``apply(<module>.<UNIT>, ...)``,
    ``ops.unit("name")``, or a direct call of the unit's module's function."""
    folder = package_dir("riftco") / "autograd"
    short = u.method.__module__.rpartition(".")[2]
    fn_name = u.function.__name__ if u.function is not None else u.name
    out: list[Loc] = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {
            (a.asname or a.name)
            for node in tree.body
            if isinstance(node, ast.ImportFrom)
            for a in node.names
            if a.name == short
        }
        for top in tree.body:
            if not isinstance(top, ast.FunctionDef):
                continue
            for node in ast.walk(top):
                hit = (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in aliases
                    and node.attr in {var, fn_name}
                ) or (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "unit"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value == u.name
                )
                if hit:
                    line = getattr(node, "lineno", top.lineno)
                    out.append(Loc(rel(path), line, f"riftco.autograd {top.name}"))
                    break
    return out


def _vjp_of(u: OpUnit) -> Loc | None:
    """The VJP that records ``u`` (its own, or the forward's whose VJP calls ``u``)."""
    if u.vjp is not None:
        return loc_of(u.vjp)
    fn_name = u.function.__name__ if u.function is not None else u.name
    for other in units():
        code = getattr(other.vjp, "__code__", None)
        if code is not None and fn_name in code.co_names:
            loc = loc_of(other.vjp)
            return None if loc is None else Loc(loc.path, loc.line, f"{loc.name} of {other.name}")
    return None


def autograd_of(u: OpUnit) -> tuple[list[Loc], Loc | None]:
    """The ``riftco.autograd`` functions that record ``u``, and the VJP that runs it."""
    found = _unit_var(u)
    return _autograd(u, found[0] if found else None), _vjp_of(u)


def _tolerance(u: OpUnit) -> dict[str, Any]:
    t = u.tolerance
    if t.exact:
        return {"exact": True, "why": t.why}
    return {"float32": t.float32.as_dict(), "float64": t.float64.as_dict(),
            "scaled": t.scale is not None, "why": t.why}  # fmt: skip


# -- repository-only pieces ------------------------------------------------------------------
def _tests_dir() -> Path | None:
    tests = root() / "tests"
    return tests if tests.is_dir() and root_kind().startswith("source") else None


def mutants(op: str) -> list[Loc]:
    """``tests/conformance_mutants.py``'s broken backends that conformance must blame on
    ``op`` (read from its ``MUTANTS`` list, without importing the tests)."""
    tests = _tests_dir()
    path = tests / "conformance_mutants.py" if tests else None
    if path is None or not path.is_file():
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = {n.name: n.lineno for n in tree.body if isinstance(n, ast.ClassDef)}
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Tuple)
            and len(node.elts) == 2
            and isinstance(node.elts[0], ast.Name)
            and isinstance(node.elts[1], ast.Constant)
            and node.elts[1].value == op
        ):
            name = node.elts[0].id
            out.append(Loc(rel(path), lines.get(name), name))
    return out


def _test_pattern(op: str) -> re.Pattern[str]:
    if "_" in op:  # distinctive: the word itself (``\b`` keeps layer_norm off layer_norm_backward)
        return re.compile(rf"\b{op}\b")
    return re.compile(rf"(?:\bops\.{op}\b|\bbackend\.{op}\(|\bbe\.{op}\(|[\"']{op}[\"'])")


def tests_of(op: str) -> list[Loc]:
    """Test files of the repository that name ``op`` (its unit, function or method)."""
    tests = _tests_dir()
    if tests is None:
        return []
    pattern = _test_pattern(op)
    return [
        Loc(rel(p))
        for p in sorted(tests.rglob("*.py"))
        if pattern.search(p.read_text(encoding="utf-8"))
    ]


# -- the answer -----------------------------------------------------------------------------
def where(name: str) -> Where:
    """Everything ``riftco ops --where name`` prints, for the op unit ``name``."""
    import riftco.ops  # noqa: F401  (every unit registered)

    u = unit(name)
    found = _unit_var(u)
    var = found[0] if found else None
    unit_file = inspect.getsourcefile(u.method) or ""
    unit_loc = Loc(rel(unit_file), _assignment_line(unit_file, var) if var else None,
                   var or u.name)  # fmt: skip
    samples = None
    if isinstance(u.testing, str):
        spec = importlib.util.find_spec(u.testing)
        if spec is not None and spec.origin:
            samples = Loc(rel(spec.origin), None, f"SAMPLES[{u.name!r}]")
    return Where(
        op=u.name,
        kind=u.kind,
        module=u.module,
        root=str(root()),
        root_kind=root_kind(),
        unit=unit_loc,
        function=loc_of(u.function, f"riftco.ops.{u.function.__name__}") if u.function else None,
        composite=loc_of(u.composite) if u.composite else None,
        samples=samples,
        autograd=_autograd(u, var),
        vjp=_vjp_of(u),
        tolerance=_tolerance(u),
        backends=[implementation(n, c, u) for n, c in backend_classes().items()],
        mutants=mutants(u.name),
        tests=tests_of(u.name),
    )


def locations(w: Where) -> Iterator[Loc]:
    """Every place ``w`` names (for the test that each exists)."""
    yield w.unit
    for loc in (w.function, w.composite, w.samples, w.vjp):
        if loc is not None:
            yield loc
    yield from w.autograd
    for b in w.backends:
        if b.method is not None:
            yield b.method
        yield from b.code
    yield from w.mutants
    yield from w.tests


def text(w: Where) -> str:
    """The plain-text answer: one labelled line per piece."""

    def line(label: str, value: object) -> str:
        return f"  {label:<13} {value}" if len(label) <= 13 else f"  {label}\n  {'':<13} {value}"

    tol = w.tolerance
    if tol.get("exact"):
        tol_text = f"exact ({tol['why']})"
    else:
        f32, f64 = tol["float32"], tol["float64"]
        scaled = " x scale" if tol["scaled"] else ""
        tol_text = (
            f"float32 atol={f32['atol']:.0e}{scaled} rtol={f32['rtol']:.0e}; float64 "
            f"atol={f64['atol']:.0e} rtol={f64['rtol']:.0e}; why: {tol['why'] or '-'}"
        )
    tier = "optional: a backend without it runs the composite" if w.kind == "fused" else "required"
    out = [
        f"{w.op}  ({w.kind}, module {w.module}; {tier})",
        f"root: {w.root}  [{w.root_kind}; paths below are relative to it]",
        line("unit", w.unit),
        line("function", w.function or "-"),
        line("composite", w.composite or "- (required op)"),
        line("samples", w.samples or "-"),
        line("autograd", "; ".join(map(str, w.autograd)) or "- (no Variable-level function)"),
        line("vjp", w.vjp or "-"),
        line("tolerance", tol_text),
    ]
    grouped: dict[str, list[str]] = {}  # backends running the same code share a line
    for b in w.backends:
        if b.mode == "composite":
            grouped.setdefault(f"composite ({b.note})", []).append(b.backend)
            continue
        parts = [str(b.method)]
        if b.code:
            parts.append(", ".join(map(str, b.code)))
        note = f"  [{b.note}]" if b.note else ""
        grouped.setdefault(" -> ".join(parts) + note, []).append(b.backend)
    for value, names in grouped.items():
        out.append(line(", ".join(names), value))
    repo = "- (tests are in the repository, not installed)" if _tests_dir() is None else "-"
    out.append(line("mutants", ", ".join(map(str, w.mutants)) or repo))
    out.append(line("tests", ", ".join(t.path for t in w.tests) or repo))
    return "\n".join(out)


def main(name: str, as_json: bool, write: Callable[[str], Any] = print) -> int:
    """``riftco ops --where name [--json]``; an unknown name is a clear error (exit 2)."""
    import json

    import riftco.ops  # noqa: F401

    known = [u.name for u in units()]
    if name not in known:
        import difflib

        close = difflib.get_close_matches(name, known, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        print(f"riftco ops: no op named {name!r}{hint} (riftco ops lists them)", file=sys.stderr)
        return 2
    w = where(name)
    write(json.dumps(w.as_dict(), indent=2) if as_json else text(w))
    return 0
