"""Devices: ``"cpu"``, ``"opencl:1"``, ``"metal"``, ``"auto"``, and the per-thread default.

Nothing here ever falls back to another backend: asking for an unavailable one raises
with the reason. The default device is ``RIFTCO_BACKEND`` when set, else ``cpu`` (the
reference backend: a library import should not grab a GPU on its own), scoped per thread
by :func:`default_device`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import tensor as _tensor
from .errors import UnknownBackendError
from .plugins import get_registry


@dataclass(frozen=True)
class Device:
    """A backend name plus a device index. Cheap, hashable, comparable."""

    name: str
    index: int = 0

    @property
    def backend(self) -> Any:
        """The backend instance serving this device (raises if it is unavailable)."""
        return get_registry().instance(self.name, self.index)

    def __str__(self) -> str:
        return f"{self.name}:{self.index}"


def parse(spec: str) -> Device:
    """``"name"`` or ``"name:N"`` -> Device; ``"auto"`` resolves through the registry."""
    spec = spec.strip()
    if not spec:
        raise UnknownBackendError("[device] empty device string")
    name, _, index = spec.partition(":")
    if name == "auto":
        name = get_registry().auto()[0]
    if index and not index.isdigit():
        raise UnknownBackendError(f"[device] bad device index in {spec!r}; expected 'name:N'")
    get_registry().entry(name)  # unknown names fail here, with a did-you-mean
    return Device(name, int(index) if index else 0)


def device(spec: str | Device | None = None) -> Device:
    """Resolve a device. ``None`` means the current default device."""
    if spec is None:
        return get_default_device()
    if isinstance(spec, Device):
        return spec
    dev = parse(spec)
    dev.backend  # noqa: B018 - surface unavailability now, with its reason
    return dev


as_device = device

_local = threading.local()


def get_default_device() -> Device:
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    return device(os.environ.get("RIFTCO_BACKEND") or "cpu")


@contextlib.contextmanager
def default_device(spec: str | Device) -> Iterator[Device]:
    """Within the block, constructors on this thread create tensors on ``spec``."""
    dev = device(spec)
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(dev)
    try:
        yield dev
    finally:
        stack.pop()


_tensor.LAYERS.devices = sys.modules[__name__]  # Tensor.to() and Tensor.device resolve here
