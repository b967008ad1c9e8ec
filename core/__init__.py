"""riftco: a GPU-first array backend plugin architecture.

A small backend-agnostic core (Tensor, raw ops, autograd, nn) talks only to the
:class:`Backend` protocol; backends arrive as pluggy plugins through the ``riftco``
entry-point group. See README.md and docs/.
"""

# ruff: noqa: E402 (startup.py's hook goes in before the imports below can be interrupted)
from __future__ import annotations

from .startup import quiet_interrupt_in_command as _quiet

_quiet()  # first: Ctrl-C while the riftco command imports prints one line (startup.py)

from importlib import metadata as _metadata  # noqa: E402

from . import autograd, ops, optim  # noqa: E402  (after Tensor: autograd builds on it)
from .autograd import Variable, no_grad  # noqa: E402
from .backend import (
    PROTOCOL_VERSION,
    Backend,
    BackendBase,
    Capabilities,
    DeviceInfo,
    FusedBackend,
)
from .creation import arange, full, ones, randn, tensor, zeros
from .device import Device, default_device, device, get_default_device
from .dtypes import float32, float64, int32, int64
from .errors import (
    BackendContractError,
    BackendUnavailableError,
    CaptureError,
    DeviceLostError,
    DeviceMismatchError,
    DomainError,
    DTypeError,
    GradientError,
    KernelCompileError,
    OutOfMemoryError,
    PluginError,
    RiftcoError,
    ShapeError,
    StaleGraphError,
    UnknownBackendError,
    ValidationError,
)
from .hookspecs import hookimpl, hookspec
from .lazy_backend import LazyBackend
from .plugins import get_registry, register
from .replay import CaptureWarning, capture
from .tensor import Tensor

try:
    __version__ = _metadata.version("riftco")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"

from . import shadow as _shadow  # noqa: E402,F401  (RIFTCO_VALIDATE=cpu: shadow validation)

__all__ = [
    "autograd", "optim", "Variable", "no_grad", "capture", "CaptureWarning", "CaptureError",
    "PROTOCOL_VERSION", "Backend", "BackendBase", "FusedBackend", "Capabilities", "DeviceInfo",
    "Tensor",
    "Device", "device", "default_device", "get_default_device", "get_registry", "register",
    "hookimpl", "hookspec", "LazyBackend", "ops", "tensor", "zeros", "ones", "full", "arange",
    "randn",
    "float32", "float64", "int32", "int64",
    "RiftcoError", "ShapeError", "DTypeError", "DeviceMismatchError", "BackendUnavailableError",
    "UnknownBackendError", "PluginError", "StaleGraphError", "GradientError", "DomainError",
    "KernelCompileError", "ValidationError", "BackendContractError", "OutOfMemoryError",
    "DeviceLostError",
]  # fmt: skip
