"""A whole training step on a kernel backend waits on the host exactly once: for the loss.

Forward, backward (both attention modes, with the label-smoothing head too), gradient
clipping and AdamW all stay on the device; the only download is the 4-byte loss the
progress bar prints.
"""

from __future__ import annotations

import pytest
import riftco
from riftco.nn import GPT, GPTConfig
from riftco.train.data import CharDataset, load_text
from riftco.train.loop import TrainConfig, Trainer


def _opencl():
    entry = riftco.get_registry().entries.get("opencl")
    if entry is None or not entry.available or not entry.devices():
        pytest.skip(f"no usable OpenCL device: {entry.reason if entry else 'not registered'}")
    return riftco.device("opencl")


@pytest.mark.parametrize(
    "attention, smoothing", [("materialized", 0.0), ("flash", 0.0), ("materialized", 0.1)]
)
def test_training_step_downloads_only_the_loss(attention, smoothing):
    dev = _opencl()
    text, source = load_text(None)
    data = CharDataset.from_text(text[:20_000], 8, source)
    cfg = GPTConfig(
        vocab=data.tokenizer.vocab_size, context=8, layers=1, heads=2, width=16,
        attention=attention,
    )  # fmt: skip
    tcfg = TrainConfig(steps=4, batch_size=2, grad_clip=1.0, label_smoothing=smoothing)
    trainer = Trainer(GPT(cfg, device=dev, seed=0), data, tcfg)
    trainer.train_step()  # compiles kernels, creates optimizer state
    backend = dev.backend
    backend.reset_transfer_stats()
    loss = trainer.train_step()
    stats = backend.transfer_stats()
    assert loss == loss  # a number, not NaN
    assert stats["downloads"] == 1, stats
    assert stats["download_bytes"] == 4, stats  # one float32: the loss
    assert stats["launches"] > 50, stats  # the step really ran on the device
