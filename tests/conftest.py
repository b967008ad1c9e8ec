"""Fixtures every test file may use. Keep this small and generic.

The tests live in folders that mirror the code (``ops/``, ``backends/<name>/``, ...); the
helper modules they share (``helpers.py``, ``plugin_fakes.py``, ``conformance_mutants.py``,
``data/``, ...) stay here, and this folder goes on ``sys.path`` so that every test imports
them by their plain names (``from helpers import assert_close``) from any depth.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

try:  # hypothesis is a test extra; the suite still runs without it
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover
    settings = None

if settings is not None:
    # Few examples, same examples on every run: fast and reproducible.
    settings.register_profile(
        "riftco",
        max_examples=25,
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "riftco"))

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

_ENV = ("RIFTCO_BACKEND", "RIFTCO_STRICT_PLUGINS", "RIFTCO_DISABLE_PLUGINS")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240601)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A fresh global registry (entry points re-read, plugin env vars cleared), restored after.

    Use it whenever a test registers backends or changes plugin environment variables.
    """
    from riftco import plugins

    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    saved = plugins._registry
    try:
        yield plugins.reset_registry()
    finally:
        if saved is not None:
            plugins.reset_registry(saved)
        else:
            plugins._registry = None


@functools.cache
def _touches_opencl(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8").lower()
    except OSError:
        return False
    return "opencl" in text or "standin" in text


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of a module that mentions OpenCL or the Metal stand-in (which runs
    on OpenCL) with ``opencl``: ``make test-pip-pocl`` reruns exactly those against the
    PoCL that pip installs alone. Read from the source, so a new kernel test cannot be
    left out by forgetting a marker."""
    for item in items:
        if _touches_opencl(Path(str(item.path))):
            item.add_marker(pytest.mark.opencl)
