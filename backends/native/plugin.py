"""Registers the native C backend through the same entry point third parties use."""

from __future__ import annotations

from riftco.hookspecs import hookimpl


@hookimpl
def riftco_backends() -> list[type]:
    from .backend import NativeBackend

    return [NativeBackend]
