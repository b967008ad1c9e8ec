"""The small runtime interface a GPU API must offer for ``KernelBackend`` to run on it.

Everything device specific (OpenCL, metalcompute, the Metal stand-in) lives behind these
few calls; the host layer in ``backend.py`` does the rest. Launches are asynchronous and
ordered: a runtime must execute launches, uploads and downloads in submission order (an
in-order queue), which is what lets the caching allocator hand a freed buffer to the next
op without waiting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


class Program(Protocol):
    """A compiled source: kernels are looked up by function name."""

    def kernel(self, name: str) -> Any:
        """The launchable kernel ``name``; raise ``KernelCompileError`` if it is missing."""
        ...


@runtime_checkable
class Runtime(Protocol):
    """A device queue with buffers, a compiler and a 1-D launcher."""

    #: Human-readable device name (for error messages and ``devices()``).
    device_name: str

    def allocate(self, nbytes: int) -> Any:
        """A device buffer of at least ``nbytes`` bytes (``nbytes`` > 0)."""
        ...

    def upload(self, buffer: Any, array: np.ndarray) -> None:
        """Copy the bytes of C-contiguous ``array`` to the start of ``buffer`` (ordered)."""
        ...

    def download(self, buffer: Any, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of ``buffer`` as a uint8 array, after all queued work."""
        ...

    def constant(self, data: bytes) -> Any:
        """A read-only buffer holding ``data`` (kernel parameters); never written again."""
        ...

    def compile(self, source: str, name: str) -> Program:
        """Build ``source``; raise ``KernelCompileError`` naming ``name`` with the log."""
        ...

    def launch(self, kernel: Any, global_threads: int, buffers: Sequence[Any]) -> None:
        """Queue a 1-D launch of at least ``global_threads`` threads (rounded up to whole
        groups), binding ``buffers`` in order as arguments 0, 1, ... Returns at once."""
        ...

    def synchronize(self) -> None:
        """Block until every queued command has completed."""
        ...
