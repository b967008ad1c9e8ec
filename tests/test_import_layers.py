"""riftco's modules import each other in layers, never in a circle.

Every import statement in core/ is read with ``ast`` (module level and inside functions;
``if TYPE_CHECKING:`` blocks excluded, they never run) and resolved to the module it names.
The graph must have no cycle, no module may import the package root ``riftco`` (which
imports everything), and shadow validation must not import the conformance package.
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "core"


def _module_name(path: Path) -> str:
    parts = path.relative_to(CORE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("riftco", *parts))


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in CORE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
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
            visit(child)

    visit(tree)
    return {m for m in out if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def test_no_module_imports_the_package_root() -> None:
    offenders = sorted(n for n, deps in _graph().items() if "riftco" in deps and n != "riftco")
    assert offenders == [], f"import from the defining module instead: {offenders}"


def test_core_imports_form_no_cycle() -> None:
    graph = {n: d - {"riftco"} for n, d in _graph().items() if n != "riftco"}
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
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


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
