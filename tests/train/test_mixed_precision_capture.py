"""Mixed-precision steps under ``riftco.capture`` give the eager step's bits: losses,
float32 masters, AdamW's moments and (fp16) the loss-scale trajectory, while the scale
changes between replays and some replayed steps are skipped."""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import cpu_native_opencl
from train_helpers import tiny_device_trainer

BF16 = pytest.mark.skipif(
    riftco.dtypes.bfloat16 is None, reason="bfloat16 comes from ml_dtypes (riftco[bfloat16])"
)


def _run(prec: str, capture: bool, device: str = "cpu"):
    trainer = tiny_device_trainer(
        device, "materialized", capture, precision=prec, loss_scale_interval=2
    )
    trainer.cfg.steps = 12
    if trainer.scaler is not None:
        # This fresh model's float16 gradients overflow near 2^18: from 2^16, doubling
        # every two good steps, the scale climbs into overflow, backs off and climbs again,
        # so it changes between replays and some replayed steps are skipped.
        trainer.scaler.scale = 2.0**16
    return trainer.run(progress=False), trainer


def _moments(trainer) -> list[bytes]:
    return [
        st[k].numpy().tobytes()
        for opt in trainer.optimizers
        for st in opt.state
        if st is not None
        for k in ("m", "v")
    ]


@pytest.mark.parametrize("device", cpu_native_opencl())
@pytest.mark.parametrize("prec", [pytest.param("bf16-mixed", marks=BF16), "fp16-mixed"])
def test_replays_give_the_eager_bits(prec, device):
    eager, e = _run(prec, False, device)
    replayed, r = _run(prec, True, device)
    assert r._captured.stats.replayed >= 8, (r._captured.stats, r._captured.refused)
    if prec == "fp16-mixed":
        update = r._captured_update
        assert update.stats.replayed >= 2, (update.stats, update.refused)
        assert eager.skipped_steps >= 1 and len(eager.loss_scale_events) >= 4
    assert replayed.train_losses == eager.train_losses
    assert replayed.val_losses == eager.val_losses
    assert replayed.loss_scale_events == eager.loss_scale_events
    a, b = e.model.state_dict(), r.model.state_dict()
    assert all(np.array_equal(a[k], b[k]) and a[k].dtype == np.float32 for k in a)
    assert _moments(e) == _moments(r)
