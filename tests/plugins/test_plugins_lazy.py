"""A plugin may name a backend with ``riftco.LazyBackend`` and have its class (and the heavy
library behind it) imported only when that backend is asked for."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import riftco
from helpers import plugin_for
from riftco import LazyBackend


def _package(root: Path, name: str, body: str) -> str:
    """A package ``name`` on ``sys.path`` whose ``backend`` module holds ``body``; its import
    leaves a mark in ``sys.modules`` (``<name>.imported``), like a heavy library would."""
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    code = f"""
        import sys, types
        sys.modules["{name}.imported"] = types.ModuleType("{name}.imported")
        from riftco.backends.cpu.backend import CPUBackend
    """
    (pkg / "backend.py").write_text(textwrap.dedent(code) + textwrap.dedent(body))
    return f"{name}.backend"


@pytest.fixture
def heavy(registry: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"heavy_{tmp_path.name.replace('-', '_')}"
    module = _package(tmp_path, name, """
        class HeavyBackend(CPUBackend):
            name = "heavy"
            priority = -50
    """)  # fmt: skip
    yield registry, module, name
    for mod in [m for m in sys.modules if m.startswith(name)]:
        del sys.modules[mod]


def test_device_cpu_does_not_import_a_lazy_backend(heavy: Any) -> None:
    registry, module, name = heavy
    assert registry.register(plugin_for(LazyBackend("heavy", f"{module}:HeavyBackend", -50)))
    assert riftco.device("cpu").backend.name == "cpu"
    entry = registry.entry("heavy")
    assert entry.priority == -50 and entry.origin == f"{module}.HeavyBackend"
    assert module not in sys.modules and f"{name}.imported" not in sys.modules
    assert registry.auto()[0] != "heavy"  # ranked below: auto never needed to import it
    assert module not in sys.modules
    x = riftco.tensor([1.0, -2.0], device="heavy")  # asked for: imported now
    assert module in sys.modules and x.device.backend.name == "heavy"
    assert (x * x).numpy().tolist() == [1.0, 4.0]
    assert entry.cls is not None and entry.cls.__name__ == "HeavyBackend"


def test_a_lazy_class_that_disagrees_with_its_declaration_is_unavailable(heavy: Any) -> None:
    registry, module, _ = heavy
    registry.register(plugin_for(LazyBackend("heavy", f"{module}:HeavyBackend", priority=7)))
    entry = registry.entry("heavy")
    assert not entry.available and entry.refused
    assert "has name 'heavy' and priority -50" in entry.reason
    assert "LazyBackend('heavy', priority=7)" in entry.reason
    with pytest.raises(riftco.BackendUnavailableError, match="priority=7"):
        riftco.device("heavy")


def test_a_lazy_import_that_fails_names_the_target(registry: Any) -> None:
    registry.register(plugin_for(LazyBackend("ghost", "no_such_pkg_xyz.backend:Ghost")))
    entry = registry.entry("ghost")
    assert not entry.available
    assert entry.reason.startswith("importing no_such_pkg_xyz.backend:Ghost raised ")
    assert "ModuleNotFoundError" in entry.reason
    name, why = registry.auto()  # it is named among the skipped, auto goes on
    assert name != "ghost" and "ghost (importing no_such_pkg_xyz" in why


def test_a_malformed_lazy_declaration_fails_its_plugin(registry: Any) -> None:
    assert (
        registry.register(plugin_for(LazyBackend("bad", "no_colon_here")), name="bad-plugin") == []
    )
    assert "expected 'package.module:ClassName'" in registry.failed_plugins["bad-plugin"]
