"""The riftco error hierarchy.

Every error raised by riftco for bad input derives from :class:`RiftcoError`, so callers
can catch one type. Messages follow one pattern: ``[op] what was given; what was
expected`` so that a failure deep in a training loop still names the operation.
"""

from __future__ import annotations


class RiftcoError(Exception):
    """Base class of every error riftco raises on purpose."""


class ShapeError(RiftcoError, ValueError):
    """Operand shapes (or ranks) do not fit the operation."""


class DTypeError(RiftcoError, TypeError):
    """An operand has a dtype the operation or the backend does not accept."""


class DeviceMismatchError(RiftcoError, ValueError):
    """Operands live on different backends or devices; riftco never moves them silently."""


class BackendUnavailableError(RiftcoError, RuntimeError):
    """A backend was asked for but cannot run here; the message carries the reason."""


class UnknownBackendError(RiftcoError, KeyError):
    """No backend of that name is registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PluginError(RiftcoError, RuntimeError):
    """A plugin is malformed: duplicate names, protocol mismatch, import failure in strict mode."""


class StaleGraphError(RiftcoError, RuntimeError):
    """A value the graph recorded at forward time was changed before ``backward()``."""


class GradientError(RiftcoError, RuntimeError):
    """A gradient has the wrong count, shape or backend (custom VJPs, seeds, checkpoints)."""


class DomainError(RiftcoError, ValueError):
    """An input is outside an operation's domain (``log`` of a non-positive value, ...)."""


class OutOfMemoryError(RiftcoError, MemoryError):
    """A backend could not allocate a buffer; the message names the op, shape, dtype, bytes."""


class KernelCompileError(RiftcoError, RuntimeError):
    """A GPU kernel failed to build; the message holds the kernel name and compiler log."""


class BackendContractError(RiftcoError, RuntimeError):
    """A backend broke an op's result contract (wrong dtype, shape, count, or an alias of
    an input where a new tensor is promised). The message names the op and the backend."""


class CaptureError(RiftcoError, RuntimeError):
    """A step cannot be captured as written (it reads device values, writes a tensor it
    did not get as an argument, ...); the message says what and how to change it."""


class DeviceLostError(RiftcoError, RuntimeError):
    """The device can run no more work in this process (a sticky CUDA context error such
    as an illegal address): every later call would fail the same way, so callers that go
    on case by case (conformance) stop at the first one instead of cascading."""


class ValidationError(RiftcoError, AssertionError):
    """Shadow validation (``RIFTCO_VALIDATE=cpu``) saw a backend diverge from the reference."""


def op_error(cls: type[RiftcoError], op: str, message: str) -> RiftcoError:
    """Build ``cls`` with the ``[op]`` prefix every riftco message carries."""
    return cls(f"[{op}] {message}")
