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
(``tests/test_op_locations.py``). Tests and mutants are in the repository only: they are
listed when the root is a source tree.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from .ops.opunit import OpUnit, unit, units

#: Packages whose folders make up riftco wherever it is installed.
_PACKAGES = ("riftco", "riftco.backends", "riftco.shaders", "riftco.conformance")
#: a kernel written out (a macro's body lines end in a backslash and are read below)
_KERNEL = re.compile(r"^[ \t]*KERNEL\s+void\s+(\w+)\s*\((?![^\n]*\\$)", re.M)
#: ``#define NAME(params) body`` over continued lines, the kernels its body declares, and
#: a macro called at the start of a line
_MACRO = re.compile(r"^#define\s+(\w+)\(([^)]*)\)((?:[^\n]*\\\n)+[^\n]*)", re.M)
_MACRO_KERNEL = re.compile(r"KERNEL\s+void\s+(\w+(?:\s*##\s*\w+)*)\s*\(")
_CALL = re.compile(r"^(\w+)\(([^)]*)\)", re.M)
_C_SYMBOL = re.compile(r"^(?:int|void|double|float)\s+F\((\w+)\)\s*\(", re.M)


@dataclass(frozen=True)
class Loc:
    """A place in riftco's files: ``path`` relative to the root (absolute when outside it)."""

    path: str
    line: int | None = None
    name: str = ""

    def __str__(self) -> str:
        at = f"{self.path}:{self.line}" if self.line else self.path
        return f"{at} ({self.name})" if self.name else at


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
    family: str
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


# -- roots and paths ------------------------------------------------------------------------
@cache
def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations is not None, package
    return Path(next(iter(spec.submodule_search_locations))).resolve()


@cache
def root() -> Path:
    """The folder every riftco file lies under: the source tree of an editable install (the
    folders ``package-dir`` maps), or the installed ``riftco`` package."""
    return Path(os.path.commonpath([_package_dir(p) for p in _PACKAGES]))


def root_kind() -> str:
    if (root() / "pyproject.toml").is_file():
        return "source tree (editable install)"
    return "installed package"


def rel(path: str | Path) -> str:
    p = Path(path).resolve()
    try:
        return p.relative_to(root()).as_posix()
    except ValueError:
        return str(p)


def _loc(obj: Any, name: str = "") -> Loc | None:
    try:
        target = inspect.unwrap(obj)
        file = inspect.getsourcefile(target)
        line = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        return None
    if file is None:
        return None
    return Loc(rel(file), line, name or getattr(target, "__qualname__", ""))


# -- reading code -----------------------------------------------------------------------------
def _tree(fn: Any) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (TypeError, OSError, SyntaxError):
        return None


def _under(fn: Any, folder: Path) -> bool:
    try:
        file = inspect.getsourcefile(fn)
    except TypeError:
        return False
    return file is not None and Path(file).resolve().is_relative_to(folder)


def _strings(
    fn: Any, owner: type, folders: tuple[Path, ...], depth: int = 3
) -> tuple[set[str], set[str]]:
    """String constants (and f-string patterns, ``*`` for each field, with at least three
    characters of their own) in ``fn`` and in the methods of ``owner`` and the module
    functions it calls, as far as their code lies under one of ``folders``."""
    literals: set[str] = set()
    patterns: set[str] = set()
    seen: set[Any] = set()

    def walk(f: Any, left: int) -> None:
        if f in seen or left < 0:
            return
        seen.add(f)
        tree = _tree(f)
        if tree is None:
            return
        scope = getattr(inspect.unwrap(f), "__globals__", {})
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                literals.add(node.value)
            elif isinstance(node, ast.JoinedStr):
                parts = [v.value if isinstance(v, ast.Constant) else "*" for v in node.values]
                pattern = "".join(str(p) for p in parts)
                if len(pattern.replace("*", "")) >= 3:
                    patterns.add(pattern)
            elif isinstance(node, ast.Call):
                func, callee = node.func, None
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                    if func.value.id == "self":
                        callee = getattr(owner, func.attr, None)
                elif isinstance(func, ast.Name):
                    callee = scope.get(func.id)
                if callable(callee) and any(_under(callee, d) for d in folders):
                    walk(callee, left - 1)

    walk(fn, depth)
    return literals, patterns


def _matching(names: dict[str, Loc], literals: set[str], patterns: set[str], op: str) -> list[Loc]:
    """The named things a method's strings pick: literal names, and for a pattern
    (``unary_*``) the names it matches that mention the op (all of them when none does)."""
    import fnmatch

    found = [names[s] for s in sorted(literals) if s in names]
    for pattern in sorted(patterns):
        hits = [n for n in sorted(names) if fnmatch.fnmatchcase(n, pattern)]
        mine = [n for n in hits if op in n.split("_") or n.endswith(op)]
        found += [names[n] for n in (mine or hits) if names[n] not in found]
    return found


@cache
def shader_kernels() -> dict[str, Loc]:
    """Every kernel in ``shaders/*.cl`` by name (names are unique across families): those
    written out, and those a macro makes (``RIFTCO_UNARY(unary_exp, ...)``), at the line
    of the instantiation."""
    out: dict[str, Loc] = {}
    for path in sorted(_package_dir("riftco.shaders").glob("*.cl")):
        text = path.read_text(encoding="utf-8")
        makers: dict[str, tuple[list[str], list[str]]] = {}
        for m in _MACRO.finditer(text):
            params = [p.strip() for p in m.group(2).split(",")]
            names = [k.replace(" ", "") for k in _MACRO_KERNEL.findall(m.group(3))]
            if names:
                makers[m.group(1)] = (params, names)
        found = [(m.group(1), m.start(1)) for m in _KERNEL.finditer(text)]
        for m in _CALL.finditer(text):
            if m.group(1) in makers:
                params, names = makers[m.group(1)]
                args = dict(zip(params, (a.strip() for a in m.group(2).split(",")), strict=False))
                for name in names:
                    parts = [args.get(p, p) for p in name.split("##")]
                    found.append(("".join(parts), m.start(1)))
        for name, at in found:
            out.setdefault(name, Loc(rel(path), text.count("\n", 0, at) + 1, name))
    return out


@cache
def c_symbols(folder: Path) -> dict[str, Loc]:
    """Functions ``F(name)`` of the C files in ``folder`` (each built as ``name_f32`` and
    ``name_f64``, see backends/native/kernels.c)."""
    out: dict[str, Loc] = {}
    for path in sorted(folder.glob("*.c")):
        text = path.read_text(encoding="utf-8")
        for m in _C_SYMBOL.finditer(text):
            line = text.count("\n", 0, m.start(1)) + 1
            out.setdefault(m.group(1), Loc(rel(path), line, f"{m.group(1)}_f32, {m.group(1)}_f64"))
    return out


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
    method = _loc(fn, f"{owner.__qualname__}.{u.name}")
    folder = Path(inspect.getsourcefile(owner) or ".").resolve().parent
    literals, patterns = _strings(fn, cls, (root(), folder))
    impl = BackendImpl(backend, "native", method)
    cpu = _package_dir("riftco.backends") / "cpu"
    if folder == cpu:
        impl.code = _helpers(fn, cpu)
        own = cls.__module__.startswith("riftco.backends.cpu")
        impl.note = "the reference (numpy)" if own else "inherited from the cpu reference"
    elif _is_kernel_backend(cls):
        impl.code = _matching(shader_kernels(), literals, patterns, u.name)
        impl.note = "launch plan: shaders/ kernels" if impl.code else "host side, no kernel"
    elif c_symbols(folder):
        impl.code = _matching(c_symbols(folder), literals, patterns, u.name)
        impl.note = "C kernels" if impl.code else "numpy in the method itself"
    return impl


def _helpers(fn: Any, folder: Path) -> list[Loc]:
    """Module-level functions under ``folder`` that ``fn`` calls (the math it is made of)."""
    tree = _tree(fn)
    if tree is None:
        return []
    scope = getattr(inspect.unwrap(fn), "__globals__", {})
    out: list[Loc] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            callee = scope.get(node.func.id)
            plumbing = node.func.id in ("_v", "view")  # a tensor's numpy view, not math
            if inspect.isfunction(callee) and _under(callee, folder) and not plumbing:
                loc = _loc(callee, node.func.id)
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
    folder = _package_dir("riftco") / "autograd"
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
        return _loc(u.vjp)
    fn_name = u.function.__name__ if u.function is not None else u.name
    for other in units():
        code = getattr(other.vjp, "__code__", None)
        if code is not None and fn_name in code.co_names:
            loc = _loc(other.vjp)
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
        family=u.family,
        root=str(root()),
        root_kind=root_kind(),
        unit=unit_loc,
        function=_loc(u.function, f"riftco.ops.{u.function.__name__}") if u.function else None,
        composite=_loc(u.composite) if u.composite else None,
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
        f"{w.op}  ({w.kind}, family {w.family}; {tier})",
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
