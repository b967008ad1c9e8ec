"""Fixtures every test file may use. Keep this small and generic."""

from __future__ import annotations

import os
from collections.abc import Iterator

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
