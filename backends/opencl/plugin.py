"""Registers the OpenCL backend. Importing pyopencl happens in the backend's probe."""

from __future__ import annotations

from riftco.hookspecs import hookimpl


@hookimpl
def riftco_backends() -> list[type]:
    from .backend import OpenCLBackend

    return [OpenCLBackend]
