"""How often the Metal runtime makes the host wait (docs/METAL.md, "What one call costs").

metalcompute returns a handle per dispatch and deleting it blocks until that command
buffer completes. The runtime must wait exactly where correctness needs it and nowhere
else: before overwriting a buffer that a queued kernel still uses, and at sync points.
A fake metalcompute whose "GPU" runs queued work in order only when a handle is dropped
makes every wait observable; the stand-in then checks a whole training step.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest
from riftco.backends.metal import runtime as mrt
from riftco.backends.metal.runtime import MetalRuntime


class _Queue:
    """An in-order queue that executes work only when the host waits for it."""

    def __init__(self) -> None:
        self.queued: list[_Work] = []
        self.executed: list[int] = []
        self.drops: list[int] = []
        self.blocking_waits = 0

    def run_through(self, work: _Work) -> None:
        if work.done:
            return
        self.blocking_waits += 1
        while True:  # in submission order, like command buffers on one MTLCommandQueue
            head = self.queued.pop(0)
            head.execute()
            if head is work:
                return


class _Work:
    """A dispatch waiting on the fake GPU (the queue holds this, never the handle)."""

    def __init__(self, queue: _Queue, index: int, body: Any, buffers: tuple[Any, ...]) -> None:
        self.queue, self.index, self.body, self.buffers = queue, index, body, buffers
        self.done = False

    def execute(self) -> None:
        self.body(*self.buffers)
        self.done = True
        self.queue.executed.append(self.index)


class _Run:
    """The handle: deleting it waits for its work, as metalcompute's Run does."""

    def __init__(self, work: _Work) -> None:
        self.work = work

    def __del__(self) -> None:
        self.work.queue.drops.append(self.work.index)
        self.work.queue.run_through(self.work)


def _copy(src: np.ndarray, dst: np.ndarray) -> None:
    dst[:] = src


def _increment(x: np.ndarray) -> None:
    x.view(np.float32)[:] += 1.0


class _FakeMetalcompute:
    """The metalcompute surface MetalRuntime uses, with deferred execution."""

    Info = namedtuple(
        "Info", "deviceName recommendedWorkingSetSize maxTransferRate hasUnifiedMemory"
    )

    def __init__(self) -> None:
        self.queue = _Queue()
        self.dispatches = 0
        fake = self

        class Device:
            def __init__(self, index: int = -1) -> None:
                pass

            def buffer(self, n_or_data: Any) -> np.ndarray:
                if isinstance(n_or_data, int):
                    return np.zeros(n_or_data, dtype=np.uint8)
                return np.frombuffer(bytes(n_or_data), dtype=np.uint8).copy()

            def kernel(self, source: str) -> Any:
                return fake

        self.Device = Device

    def get_devices(self) -> list[Any]:
        return [self.Info("fake", 0, 0, True)]

    def function(self, name: str) -> Any:
        body = {"copy": _copy, "increment": _increment}[name]

        def call(count: int, *buffers: Any) -> _Run:
            self.dispatches += 1
            work = _Work(self.queue, self.dispatches, body, buffers)
            self.queue.queued.append(work)
            return _Run(work)

        return call


@pytest.fixture
def fake() -> tuple[_FakeMetalcompute, MetalRuntime, Any, Any]:
    mc = _FakeMetalcompute()
    rt = MetalRuntime(mc, 0)
    program = rt.compile("unused", "fake")
    return mc, rt, program.kernel("copy"), program.kernel("increment")


def _f32(values: list[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def test_upload_waits_for_a_queued_kernel_that_reads_the_buffer(fake):
    mc, rt, copy, _ = fake
    a, b = rt.allocate(8), rt.allocate(8)
    rt.upload(a, _f32([1, 2]))
    rt.launch(copy, 2, [a, b])  # queued, not run: b must get [1, 2]
    assert mc.queue.executed == []
    rt.upload(a, _f32([7, 8]))  # overwrites a: the queued copy has to run first
    assert mc.queue.executed == [1]
    np.testing.assert_array_equal(rt.download(b, 8).view(np.float32), [1, 2])
    np.testing.assert_array_equal(rt.download(a, 8).view(np.float32), [7, 8])


def test_upload_waits_for_a_queued_kernel_that_writes_the_buffer(fake):
    mc, rt, copy, _ = fake
    a, b = rt.allocate(8), rt.allocate(8)
    rt.upload(a, _f32([1, 2]))
    rt.launch(copy, 2, [a, b])  # will write b
    rt.upload(b, _f32([5, 6]))  # the host's bytes must not be overwritten by the late copy
    np.testing.assert_array_equal(rt.download(b, 8).view(np.float32), [5, 6])


def test_upload_to_a_buffer_no_queued_kernel_uses_does_not_wait(fake):
    mc, rt, copy, _ = fake
    a, b, c = rt.allocate(8), rt.allocate(8), rt.allocate(8)
    rt.launch(copy, 2, [a, b])
    rt.upload(c, _f32([3, 4]))  # the next batch: nothing queued touches c
    assert mc.queue.executed == [] and mc.queue.blocking_waits == 0
    assert rt.counters == {"drains": 0, "upload_waits_skipped": 1}
    np.testing.assert_array_equal(rt.download(c, 8).view(np.float32), [3, 4])
    assert mc.queue.executed == [1]  # the download was a sync point


def test_synchronize_blocks_once_and_runs_everything_in_order(fake):
    mc, rt, _, inc = fake
    x = rt.allocate(4)
    for _ in range(10):
        rt.launch(inc, 1, [x])
    rt.synchronize()
    assert mc.queue.executed == list(range(1, 11))
    assert mc.queue.blocking_waits == 1  # the newest handle; the rest were complete
    assert mc.queue.drops == list(range(10, 0, -1))
    assert rt.counters["drains"] == 1
    np.testing.assert_array_equal(rt.download(x, 4).view(np.float32), [10.0])


def test_pending_cap_waits_for_the_oldest_and_remembers_it(fake, monkeypatch):
    monkeypatch.setattr(mrt, "MAX_PENDING", 3)
    mc, rt, copy, inc = fake
    a, b, x = rt.allocate(8), rt.allocate(8), rt.allocate(4)
    rt.launch(copy, 2, [a, b])  # launch 1 uses a
    for _ in range(4):
        rt.launch(inc, 1, [x])  # launches 2-5: the cap drops handles 1 and 2
    assert mc.queue.executed == [1, 2]
    rt.upload(a, _f32([1, 1]))  # a's only user has completed: no further wait
    assert mc.queue.executed == [1, 2] and rt.counters["upload_waits_skipped"] == 1
    rt.upload(x, _f32([0]))  # x is still used by launches 3-5
    assert mc.queue.executed == [1, 2, 3, 4, 5]


# -- the stand-in: a whole training step ----------------------------------------------------------
try:  # the stand-in runs on OpenCL; the fake-metalcompute tests above run regardless
    from riftco.backends.opencl import runtime as clrt

    _devices, _why = clrt.enumerate_devices()
except Exception as exc:  # pyopencl missing or broken
    _devices, _why = [], f"pyopencl import failed: {exc}"


@pytest.mark.skipif(not _devices, reason=f"the stand-in needs OpenCL: {_why}")
@pytest.mark.parametrize("capture", [False, True], ids=["eager", "replayed"])
@pytest.mark.parametrize("attention", ["materialized", "flash"])
@pytest.mark.parametrize("runtime", ["metalcompute", "objc"])
def test_metal_training_step_waits_on_the_host_once(
    runtime, attention, capture, monkeypatch, registry
):
    """The batch goes up before the step's first launch and only the loss comes down: one
    host wait per step, eager or replayed (riftco.capture), on either Metal runtime (the
    objc one on its fake Objective-C runtime: then the step is one command buffer)."""
    import riftco
    from riftco import plugins
    from riftco.nn import GPT, GPTConfig
    from riftco.train.data import CharDataset, load_text
    from riftco.train.loop import TrainConfig, Trainer

    monkeypatch.setenv("RIFTCO_METAL_STANDIN", "1")
    monkeypatch.setenv("RIFTCO_METAL_RUNTIME", runtime)
    plugins.reset_registry()  # re-read the environment (the fixture restores the old one)
    dev = riftco.device("metal")
    backend = dev.backend
    text, source = load_text(None)
    data = CharDataset.from_text(text[:20_000], 8, source)
    cfg = GPTConfig(vocab=data.tokenizer.vocab_size, context=8, layers=1, heads=2, width=16,
                    attention=attention)  # fmt: skip
    trainer = Trainer(GPT(cfg, device=dev, seed=0), data, TrainConfig(steps=6, batch_size=2),
                      capture=capture)  # fmt: skip
    for _ in range(3):  # compiles, creates optimizer state; capture records twice, then replays
        trainer.train_step()
    backend.reset_transfer_stats()
    loss = trainer.train_step()
    stats = backend.transfer_stats()
    assert np.isfinite(loss)
    # downloads: the loss and, at the same sync, the 4-byte device status word
    # (core/kernel_host/status.py: out-of-range ids in the embedding/cross-entropy kernels)
    assert stats["uploads"] == 2 and stats["downloads"] == 2, stats
    assert stats["download_bytes"] == 8, stats
    assert stats["drains"] == 1, stats  # the loss; neither upload waited
    # both uploads happen while the queue is empty (the previous loss drained it)
    assert stats["upload_waits_skipped"] == 0, stats
    if runtime == "objc":
        assert stats["command_buffers"] == 1, stats
    if capture:
        assert trainer._captured.stats.replayed == 1, trainer._captured.stats
