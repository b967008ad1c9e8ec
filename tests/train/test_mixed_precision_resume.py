"""A mixed-precision run of N steps equals one of k steps, saved, resumed and run to N: the
same losses, weights, AdamW moments and (fp16) loss scale, growth counter and trajectory.
A checkpoint without its loss scale is a ``[checkpoint]`` error, like any damage."""

from __future__ import annotations

import json

import numpy as np
import pytest
import riftco
from riftco.train import checkpoint as ckpt_mod
from riftco.train.checkpoint import CheckpointError, load_checkpoint
from riftco.train.loop import Trainer
from train_helpers import head_corpus, tiny_trainer

BF16 = pytest.mark.skipif(
    riftco.dtypes.bfloat16 is None, reason="bfloat16 comes from ml_dtypes (riftco[bfloat16])"
)
PRECISIONS = [pytest.param("bf16-mixed", marks=BF16), "fp16-mixed"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return head_corpus(tmp_path_factory)


def _trainer(corpus, out, prec):
    train = dict(steps=10, batch_size=2, lr=1e-2, warmup=1, eval_every=3, eval_iters=1)
    model = dict(context=8, layers=1, heads=2, width=16)
    trainer = tiny_trainer(corpus, out, None, model, precision=prec, loss_scale_interval=4, **train)
    if trainer.scaler is not None:
        # This fresh model's float16 gradients overflow near 2^18: from there, doubling
        # after four good steps, the run both skips steps and grows the scale in ten steps.
        trainer.scaler.scale = 2.0**18
    return trainer


def _stop_step(prec, counts, events) -> int:
    """Where to cut the run: step 6, or for fp16 the first step after which the count of
    good steps is above zero and the scale still grows later (so a resume that lost the
    count, or the scale, would grow it at another step)."""
    if prec != "fp16-mixed":
        return 6
    grows = [step for step, _, _, skipped in events if not skipped]
    cuts = [k for k, n in counts if n > 0 and any(g > k for g in grows)]
    assert cuts and any(skipped for *_, skipped in events), events  # both kinds happened
    return cuts[0]


@pytest.mark.parametrize("prec", PRECISIONS)
def test_resume_is_bit_exact(corpus, tmp_path, prec):
    counts: list[tuple[int, int]] = []

    def count(t, loss):
        counts.append((t.step, t.scaler.good_steps if t.scaler else 0))

    full = _trainer(corpus, tmp_path / "full", prec).run(progress=False, on_step=count)
    k = _stop_step(prec, counts, full.loss_scale_events)
    part = _trainer(corpus, tmp_path / "part", prec).run(
        progress=False, on_step=lambda t, loss: t.step == k
    )
    assert part.interrupted and part.step == k
    resumed_trainer = Trainer.resume(tmp_path / "part", device="cpu")
    assert resumed_trainer.precision.name == prec
    resumed = resumed_trainer.run(progress=False)
    assert resumed.train_losses == full.train_losses  # the steps after k bit for bit
    assert resumed.val_losses == full.val_losses
    a, b = load_checkpoint(tmp_path / "full"), load_checkpoint(tmp_path / "part")
    assert all(np.array_equal(a.weights[n], b.weights[n]) for n in a.weights)
    for sa, sb in zip(a.optimizer, b.optimizer, strict=True):
        for ea, eb in zip(sa["state"], sb["state"], strict=True):
            assert ea["step"] == eb["step"]
            assert all(np.array_equal(ea[m], eb[m]) for m in ("m", "v"))
    if prec == "fp16-mixed":
        assert a.meta["loss_scale"] == b.meta["loss_scale"]  # scale, count, trajectory
        assert resumed.loss_scale_events == full.loss_scale_events
        assert resumed.skipped_steps == full.skipped_steps


def test_a_checkpoint_without_its_loss_scale_is_refused(corpus, tmp_path):
    _trainer(corpus, tmp_path, "fp16-mixed").run(progress=False, on_step=lambda t, _: True)
    folder = ckpt_mod.resolve(tmp_path)
    state = json.loads((folder / "state.json").read_text())
    del state["loss_scale"]
    state["state_sha256"] = ckpt_mod._state_hash(state)
    (folder / "state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match=r"state\.json.*lacks the key 'loss_scale'"):
        Trainer.resume(tmp_path, device="cpu")


def test_a_malformed_loss_scale_is_refused(corpus, tmp_path):
    _trainer(corpus, tmp_path, "fp16-mixed").run(progress=False, on_step=lambda t, _: True)
    folder = ckpt_mod.resolve(tmp_path)
    state = json.loads((folder / "state.json").read_text())
    state["loss_scale"]["scale"] = 3.0
    state["state_sha256"] = ckpt_mod._state_hash(state)
    (folder / "state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match="loss scale state is malformed.*power of two"):
        Trainer.resume(tmp_path, device="cpu")
