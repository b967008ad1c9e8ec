"""The fake CUDA driver's memory and streams: host buffers standing in for device memory.

Device pointers are addresses in a private range that grows and is never reused (a guard
gap separates allocations), each backed by a host ``bytearray`` of exactly its size, so a
stale pointer can never alias a newer allocation and a range one byte too long is caught.

A stream is a queue: copies, memsets, launches and stream-ordered frees are enqueued and
run only when something waits for them (a stream/context/event synchronisation, or a
copy to pageable memory, which the real driver completes before returning). This is the
latest schedule the CUDA contract allows, so a read of pinned memory before its copy
completed, or pinned staging bytes overwritten before their copy ran, shows up here.
"""

from __future__ import annotations

import bisect
import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: First fake device address (real CUDA pointers on Linux look alike: unified addressing).
DEVICE_BASE = 0x7E00_0000_0000
#: Allocations start on this alignment, with at least one empty granule between them.
GRANULE = 512


@dataclass
class Allocation:
    """One device allocation; ``freed_at`` is the index of the call that freed it."""

    ptr: int
    nbytes: int
    context: int
    call: str  # cuMemAlloc or cuMemAllocAsync
    made_at: int
    data: bytearray | None
    freed_at: int | None = None
    #: enqueued operations (not yet run) that use this allocation, by stream handle
    pending: dict[int, int] = field(default_factory=dict)

    def describe(self) -> str:
        state = f"freed by call #{self.freed_at}" if self.freed_at is not None else "live"
        return (
            f"0x{self.ptr:x} ({self.nbytes} bytes from {self.call} at call #{self.made_at}, "
            f"{state})"
        )


class DeviceMemory:
    """Allocations by address, live and freed (a freed one stays for error messages)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.by_ptr: dict[int, Allocation] = {}
        self.next = DEVICE_BASE
        self.live_bytes = 0

    def allocate(self, nbytes: int, context: int, call: str, made_at: int) -> Allocation:
        ptr = self.next
        self.next += (-(-max(nbytes, 1) // GRANULE) + 1) * GRANULE
        alloc = Allocation(ptr, nbytes, context, call, made_at, bytearray(nbytes))
        self.starts.append(ptr)  # addresses only grow: the list stays sorted
        self.by_ptr[ptr] = alloc
        self.live_bytes += nbytes
        return alloc

    def find(self, address: int) -> Allocation | None:
        """The allocation (live or freed) whose range holds ``address``."""
        i = bisect.bisect_right(self.starts, address) - 1
        if i < 0:
            return None
        alloc = self.by_ptr[self.starts[i]]
        return alloc if address < alloc.ptr + max(alloc.nbytes, 1) else None

    def release(self, alloc: Allocation, freed_at: int) -> None:
        alloc.freed_at = freed_at
        self.live_bytes -= alloc.nbytes

    def live(self) -> list[Allocation]:
        return [a for a in self.by_ptr.values() if a.freed_at is None]


@dataclass
class PinnedBlock:
    """Page-locked host memory from ``cuMemHostAlloc`` (kept alive while the fake lives)."""

    address: int
    nbytes: int
    buffer: Any
    freed_at: int | None = None


class PinnedMemory:
    """Pinned host blocks by address; a copy from or to one is asynchronous."""

    def __init__(self) -> None:
        self.blocks: dict[int, PinnedBlock] = {}

    def allocate(self, nbytes: int) -> PinnedBlock:
        buffer = ctypes.create_string_buffer(max(nbytes, 1))
        block = PinnedBlock(ctypes.addressof(buffer), nbytes, buffer)
        self.blocks[block.address] = block
        return block

    def find(self, address: int) -> PinnedBlock | None:
        for block in self.blocks.values():
            if block.address <= address < block.address + max(block.nbytes, 1):
                return block
        return None


@dataclass
class Operation:
    """One enqueued piece of stream work; ``run`` does it when the stream gets that far."""

    index: int  # the enqueuing call
    what: str
    run: Callable[[], None]
    uses: tuple[Allocation, ...] = ()
    fault: Any = None  # a CUresult the operation fails with when it runs (injected)


@dataclass
class Stream:
    handle: int
    context: int
    queue: list[Operation] = field(default_factory=list)
    enqueued: int = 0  # operations ever enqueued (an event records this count)
    done: int = 0  # operations run so far

    def enqueue(self, op: Operation) -> None:
        for alloc in op.uses:
            alloc.pending[self.handle] = alloc.pending.get(self.handle, 0) + 1
        self.queue.append(op)
        self.enqueued += 1

    def run_until(self, mark: int | None = None) -> Any:
        """Run queued operations up to ``mark`` (all when None); the fault of a failed one
        (the rest of the queue is then dropped, as work after a fault never runs)."""
        stop = self.enqueued if mark is None else mark
        while self.queue and self.done < stop:
            op = self.queue.pop(0)
            self.done += 1
            for alloc in op.uses:
                alloc.pending[self.handle] -= 1
            if op.fault is not None:
                self.drop()
                return op.fault
            op.run()
        return None

    def drop(self) -> None:
        for op in self.queue:
            for alloc in op.uses:
                alloc.pending[self.handle] -= 1
        self.done += len(self.queue)
        self.queue.clear()
