"""Registers the CUDA backend. The driver is probed (time-bounded) in the backend module."""

from __future__ import annotations

from riftco.hookspecs import hookimpl


@hookimpl
def riftco_backends() -> list[type]:
    from .backend import CudaBackend

    return [CudaBackend]
