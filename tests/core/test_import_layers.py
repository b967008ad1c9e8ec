"""riftco's modules import each other in layers, never in a circle.

Every import statement in core/ and backends/ is read with ``ast`` (module level and
inside functions) and resolved to the module it names. The imports that run must form no
cycle. Type-only imports (``if TYPE_CHECKING:`` blocks, which never run) must form none
either, except those into the modules ``TYPE_ONLY_UPWARD`` names, each with its reason:
with them the graph has one cycle through the ``Backend`` protocol (docs/ARCHITECTURE.md).
No module may import the package root ``riftco`` (which imports everything), and shadow
validation must not import the conformance package.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "core"
#: The folders read, and the package each one is (pyproject.toml's package-dir).
ROOTS = {CORE: ("riftco",), REPO / "backends": ("riftco", "backends")}


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((*ROOTS[root], *parts))


def _modules() -> dict[str, Path]:
    return {_module_name(p, root): p for root in ROOTS for p in root.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


#: Modules that the layers below them may name in annotations (type-only imports) though
#: they import those layers when they run, and why. Annotations never execute (every module
#: has ``from __future__ import annotations``), so these edges close no runtime cycle.
TYPE_ONLY_UPWARD = {
    "riftco.backend": "Backend is assembled from every op unit's Methods protocol, so "
    "backend.py imports the units; tensor, dispatch, checks, plugins and hookspecs name "
    "Backend only as the type of what they hold or receive",
    "riftco.device": "tensor.py types Tensor.device and Tensor.to() with Device, whose "
    "module sits above tensor (it imports plugins, which load backends)",
}


def _imports(name: str, path: Path, known: dict[str, Path]) -> tuple[set[str], set[str]]:
    """The riftco modules ``name`` imports when it runs, and those it imports for types only."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    runs: set[str] = set()
    typing: set[str] = set()

    def visit(node: ast.AST, out: set[str]) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, typing)
            for child in node.orelse:
                visit(child, out)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("riftco"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("riftco"):
                return
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else target)
        for child in ast.iter_child_nodes(node):
            visit(child, out)

    visit(tree, runs)
    runs = {m for m in runs if m in known and m != name}
    return runs, {m for m in typing if m in known and m != name} - runs


def _graph(type_only: bool = False) -> dict[str, set[str]]:
    """Each module's runtime imports; with ``type_only``, plus its type-only imports except
    those into ``TYPE_ONLY_UPWARD``."""
    known = _modules()
    graph = {}
    for name, path in known.items():
        runs, typing = _imports(name, path, known)
        graph[name] = runs | (
            {m for m in typing if m not in TYPE_ONLY_UPWARD} if type_only else set()
        )
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    graph = {n: d - {"riftco"} for n, d in graph.items() if n != "riftco"}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def walk(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                walk(dep, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [])
    return cycles


def test_no_module_imports_the_package_root() -> None:
    offenders = sorted(n for n, deps in _graph().items() if "riftco" in deps and n != "riftco")
    assert offenders == [], f"import from the defining module instead: {offenders}"


def test_core_never_imports_a_backend() -> None:
    """Core reaches backends through the plugin registry (entry points), never by import."""
    graph = _graph(type_only=True)
    offenders = {
        n: sorted(d for d in deps if d.startswith("riftco.backends"))
        for n, deps in graph.items()
        if not n.startswith("riftco.backends")
    }
    assert {n: d for n, d in offenders.items() if d} == {}


def test_core_and_backend_imports_form_no_cycle() -> None:
    """backends/ too: the cpu backend's mixins once imported ``view`` back from
    ``backend.py``, which imports them (now ``views.py``, a leaf)."""
    cycles = _cycles(_graph())
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_type_only_imports_form_no_cycle_but_the_allowed_ones() -> None:
    """A new type-only import that closes a cycle fails here, naming it: import the type
    from a lower module, or add its target to TYPE_ONLY_UPWARD with the reason."""
    cycles = _cycles(_graph(type_only=True))
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_every_allowed_type_only_import_is_needed() -> None:
    """Each TYPE_ONLY_UPWARD module is imported for types somewhere and closes a cycle
    there (it imports, when it runs, a module that names it): no stale allowance."""
    known = _modules()
    runtime = _graph()
    for target in TYPE_ONLY_UPWARD:
        importers = [n for n, p in known.items() if target in _imports(n, p, known)[1]]
        assert importers, f"{target}: nobody imports it for types; drop it from the allowance"
        closing = [n for n in importers if _reaches(runtime, target, n)]
        assert closing, f"{target}: its type-only importers close no cycle; drop the allowance"


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep == goal:
                return True
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return False


def test_shadow_validation_does_not_import_conformance() -> None:
    text = (CORE / "shadow.py").read_text(encoding="utf-8")
    assert "conformance" not in "".join(
        line for line in text.splitlines() if line.lstrip().startswith(("import", "from"))
    )


def test_the_layers_are_as_documented() -> None:
    """tensor knows nothing above it; ops never reach up to devices, plugins or autograd."""
    graph = _graph()
    assert not {d for d in graph["riftco.tensor"] if not d.startswith("riftco.errors")}
    upward = {"riftco.device", "riftco.plugins", "riftco.autograd", "riftco.backend", "riftco.nn"}
    for name, deps in graph.items():
        if name.startswith("riftco.ops"):
            assert not {
                d for d in deps if d.split(".")[:2] and any(d.startswith(u) for u in upward)
            }, name


def test_op_units_borrow_no_private_helper_from_each_other() -> None:
    """A helper two units share lives in a neutral module (``ops/checks.py``, ``ops/rows.py``),
    not as a private name of one unit that the other imports."""
    borrowed = []
    for name, path in _modules().items():
        if not name.startswith(("riftco.ops.fused.", "riftco.ops.primitive.")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                borrowed += [f"{name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert borrowed == []
