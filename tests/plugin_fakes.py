"""Fake plugins for the plugin tests: entry points without installing, and real dist-infos.

Import as ``from plugin_fakes import FakeEntryPoint, install_entry_points, write_dist``
(``tests/conftest.py`` puts ``tests/`` on ``sys.path`` for every subfolder).
"""

from __future__ import annotations

import textwrap
import types
from importlib import metadata
from pathlib import Path

import pytest
from riftco import plugins
from riftco.plugins import Registry


class FakeDist:
    def __init__(self, name: str, version: str) -> None:
        self.metadata = {"Name": name}
        self.version = version


class FakeEntryPoint:
    """Quacks like importlib.metadata.EntryPoint; ``load()`` returns or raises ``target``."""

    def __init__(self, name: str, target: object, dist: tuple[str, str] = ("fake-dist", "9.9")):
        self.name, self.group, self.value = name, "riftco", f"fake_{name}.plugin"
        self.dist = FakeDist(*dist)
        self._target = target

    def load(self) -> object:
        if isinstance(self._target, BaseException):
            raise self._target
        return self._target


def use_entry_points(monkeypatch: pytest.MonkeyPatch, *fakes: FakeEntryPoint) -> None:
    """From now on the registry sees the installed entry points plus ``fakes``."""

    def fake_entry_points(group: str) -> list[object]:
        return [*metadata.entry_points(group=group), *fakes]

    monkeypatch.setattr(plugins, "metadata", types.SimpleNamespace(entry_points=fake_entry_points))


def install_entry_points(monkeypatch: pytest.MonkeyPatch, *fakes: FakeEntryPoint) -> Registry:
    """:func:`use_entry_points`, then a fresh global registry that loads them."""
    use_entry_points(monkeypatch, *fakes)
    return plugins.reset_registry()


def installed_plugins_but(*keep: str) -> str:
    """``RIFTCO_DISABLE_PLUGINS`` value blocking every installed plugin except ``keep``."""
    names = [ep.name for ep in metadata.entry_points(group=plugins.ENTRY_POINT_GROUP)]
    return ",".join(n for n in names if n not in keep)


def write_dist(root: Path, dist: str, module: str, body: str) -> None:
    """A real installed distribution: ``root`` on sys.path makes importlib.metadata see it."""
    info = root / f"{dist}-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[riftco]\n{module} = {module}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(body))
