"""A whole training step on a kernel backend waits on the host exactly once: for the loss.

Forward, backward (both attention modes, with the label-smoothing head too), gradient
clipping and AdamW all stay on the device; the only downloads are the 4-byte loss the
progress bar prints and, at that same sync point, the 4-byte device status word through
which the embedding and cross-entropy kernels report out-of-range ids
(core/kernel_host/status.py): one wait, two small reads.

The label-smoothing head (a compiled objective) checks its targets through
``autograd.domain``'s deferred flag, which ``backward()`` reads: a second sync, again with
its status word.
"""

from __future__ import annotations

import pytest
import riftco
from train_helpers import tiny_device_trainer


def _opencl():
    entry = riftco.get_registry().entries.get("opencl")
    if entry is None or not entry.available or not entry.devices():
        pytest.skip(f"no usable OpenCL device: {entry.reason if entry else 'not registered'}")
    return riftco.device("opencl")


@pytest.mark.parametrize("capture", [False, True], ids=["eager", "replayed"])
@pytest.mark.parametrize(
    "attention, smoothing, syncs",
    [("materialized", 0.0, 1), ("flash", 0.0, 1), ("materialized", 0.1, 2)],
)
def test_training_step_downloads_only_the_loss(attention, smoothing, syncs, capture):
    """A replayed step (riftco.capture) enqueues the same launches and waits as often: its
    host functions (the target check) still read their flags."""
    dev = _opencl()
    trainer = tiny_device_trainer(dev, attention, capture, label_smoothing=smoothing)
    for _ in range(3):  # compiles kernels, creates optimizer state; capture records twice
        trainer.train_step()
    backend = dev.backend
    backend.reset_transfer_stats()
    reads = backend.device_status.reads
    loss = trainer.train_step()
    stats = backend.transfer_stats()
    assert loss == loss  # a number, not NaN
    # each sync: its value (the loss; the head's target flag) and the status word
    assert stats["downloads"] == 2 * syncs, stats
    assert stats["download_bytes"] == 8 * syncs, stats  # float32 + int32 each
    assert backend.device_status.reads - reads == syncs
    assert stats["launches"] > 50, stats  # the step really ran on the device
    if capture:
        assert trainer._captured.stats.replayed == 1, trainer._captured.stats
