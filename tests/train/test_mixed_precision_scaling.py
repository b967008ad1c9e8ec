"""fp16-mixed's dynamic loss scaling in the trainer: an overflowing step is skipped (the
parameters, AdamW's moments and its step counts keep their bits) and halves the scale,
saying so in the log; good steps in a row double it. The rule alone is in
test_loss_scaler.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from riftco import ops
from riftco.autograd import cross_entropy
from riftco.train.loop import DivergenceError
from train_helpers import tiny_device_trainer


def _fp16(steps: int, **train):
    trainer = tiny_device_trainer("cpu", "materialized", precision="fp16-mixed", **train)
    trainer.cfg.steps = steps
    return trainer


def _bits(trainer) -> dict[str, bytes]:
    return {k: v.tobytes() for k, v in trainer.model.state_dict().items()}


def test_overflow_skips_the_update_and_halves_the_scale():
    trainer = _fp16(1)
    # The loss gradient per logit is up to 1/16 (batch 2 x 8 positions); times 2^40 it is
    # ~2^36, far past float16's largest value 65504: the float16 dlogits overflow.
    trainer.scaler.scale = 2.0**40
    before = _bits(trainer)
    lines: list[str] = []
    result = trainer.run(progress=False, log=lines.append)
    assert _bits(trainer) == before
    assert all(st is None for opt in trainer.optimizers for st in opt.state)  # never stepped
    assert trainer.scaler.scale == 2.0**39 and result.skipped_steps == 1
    assert result.loss_scale_events == [(1, 2.0**40, 2.0**39, True)]
    assert lines[0] == (
        "step 1: loss scale 1.09951e+12 -> 5.49756e+11, skipped: the scaled gradients "
        "overflowed (inf or NaN); no optimizer update this step"
    )
    assert math.isfinite(result.train_losses[0][1])  # the loss is fine, its gradients are not


def test_skipped_steps_keep_every_bit_and_the_others_update():
    trainer = _fp16(26)
    trainer.scaler.scale = 2.0**40  # about 20 halvings before the gradients fit float16
    snapshots = [_bits(trainer)]
    trainer.run(progress=False, on_step=lambda t, loss: snapshots.append(_bits(t)) and None)
    skipped = {step for step, _, _, was_skipped in trainer.scaler.events if was_skipped}
    assert 15 <= len(skipped) < 26, skipped  # both kinds of step happened
    for step in range(1, 27):
        same = snapshots[step] == snapshots[step - 1]
        assert same == (step in skipped), step
    counts = {st["step"] for opt in trainer.optimizers for st in opt.state if st is not None}
    assert counts == {26 - len(skipped)}  # AdamW counted only the steps it took


def test_scale_doubles_after_the_interval_of_good_steps():
    trainer = _fp16(7, loss_scale_interval=3)
    trainer.scaler.scale = 2.0**6  # far below where this model overflows (near 2^18)
    lines: list[str] = []
    result = trainer.run(progress=False, log=lines.append)
    assert result.loss_scale_events == [(3, 64.0, 128.0, False), (6, 128.0, 256.0, False)]
    assert result.skipped_steps == 0 and trainer.scaler.good_steps == 1
    assert lines[:2] == [
        "step 3: loss scale 64 -> 128 after 3 steps without overflow",
        "step 6: loss scale 128 -> 256 after 3 steps without overflow",
    ]
    assert lines[2].startswith("step 7: train loss")  # the evaluation at the end


def test_gradients_reach_the_masters_unscaled():
    """After a good step the float32 master gradients are those of the unscaled loss: the
    same step at scale 2^10 and 2^16 gives gradients equal to float16's resolution (a
    missing or doubled unscale would differ by a factor 64)."""
    grads = []
    for scale in (2.0**10, 2.0**16):
        trainer = _fp16(1)
        trainer.scaler.scale = scale  # this fresh model's float16 gradients overflow near 2^18
        trainer.run(progress=False)
        assert trainer.scaler.skipped == 0
        grads.append(np.concatenate([p.grad.numpy().ravel() for p in trainer.params]))
    small, big = grads
    assert small.dtype == np.float32
    err = np.linalg.norm(small - big) / np.linalg.norm(big)
    assert err < 2.0**-6, err  # more gradients underflow at 2^10; never a factor 64


class _OverflowingHead:
    """A custom head (it takes ``scale=``) whose backward seed is inf: every step overflows."""

    def loss_and_backward(self, logits, targets, scale=None):
        loss = cross_entropy(logits, targets)
        loss.backward(ops.full_like(loss.value, math.inf))
        return loss.value


def test_a_scale_that_keeps_falling_stops_the_run_as_diverged():
    trainer = _fp16(10)
    trainer.head = _OverflowingHead()
    trainer.scaler.scale = 2.0**-23  # one halving from the floor
    with pytest.raises(DivergenceError) as info:
        trainer.run(progress=False)
    assert str(info.value) == (
        "[train] the float16 gradients kept overflowing until the loss scale fell to "
        "2.98023e-08 at step 2; training stopped and the weights are those of the last step "
        "that was not skipped; nothing was saved (no output directory). Start again with "
        "--precision bf16-mixed or fp32 (or a lower lr)"
    )
    assert trainer.step == 1 and trainer.scaler.skipped == 2  # the second step did not finish
