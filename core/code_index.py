"""Reading riftco's own code for ``riftco ops --where`` (see ``op_locations.py``).

Where riftco's files are (the root every printed path is relative to), the string
constants a method passes on (to ``launch``, to a C library), the kernels declared in
``shaders/*.cl`` (written out or made by a macro) and the C functions of a backend's
``*.c`` files. Text and syntax trees only: nothing here imports a backend or compiles.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import inspect
import os
import re
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

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


# -- roots and paths ------------------------------------------------------------------------
@cache
def package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations is not None, package
    return Path(next(iter(spec.submodule_search_locations))).resolve()


@cache
def root() -> Path:
    """The folder every riftco file lies under: the source tree of an editable install (the
    folders ``package-dir`` maps), or the installed ``riftco`` package."""
    return Path(os.path.commonpath([package_dir(p) for p in _PACKAGES]))


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


def loc_of(obj: Any, name: str = "") -> Loc | None:
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
def parse_source(fn: Any) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (TypeError, OSError, SyntaxError):
        return None


def defined_under(fn: Any, folder: Path) -> bool:
    try:
        file = inspect.getsourcefile(fn)
    except TypeError:
        return False
    return file is not None and Path(file).resolve().is_relative_to(folder)


def strings_reached(
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
        tree = parse_source(f)
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
                if callable(callee) and any(defined_under(callee, d) for d in folders):
                    walk(callee, left - 1)

    walk(fn, depth)
    return literals, patterns


def matching(names: dict[str, Loc], literals: set[str], patterns: set[str], op: str) -> list[Loc]:
    """The named things a method's strings pick: literal names, and for a pattern
    (``unary_*``) the names it matches that mention the op (all of them when none does)."""
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
    for path in sorted(package_dir("riftco.shaders").glob("*.cl")):
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
