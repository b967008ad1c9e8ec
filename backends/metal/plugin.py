"""Registers the Metal backend. metalcompute is imported in the backend's probe (macOS only)."""

from __future__ import annotations

from riftco.hookspecs import hookimpl


@hookimpl
def riftco_backends() -> list[type]:
    from .backend import MetalBackend

    return [MetalBackend]
