"""A run that goes wrong stops cleanly: NaN settings are refused, a non-finite loss stops
training with the last good checkpoint intact, and SIGTERM saves like Ctrl-C."""

from __future__ import annotations

import math
import os
import signal

import numpy as np
import pytest
import riftco
from riftco.errors import DomainError
from riftco.nn import GPT, GPTConfig
from riftco.train.checkpoint import load_checkpoint
from riftco.train.heads import CrossEntropyHead
from riftco.train.loop import DivergenceError, Trainer
from riftco.train.sample import generate
from train_helpers import head_corpus, tiny_trainer

TINY = dict(layers=1, heads=2, width=16)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return head_corpus(tmp_path_factory)


def _trainer(corpus, out=None, steps=8, head=None, **cfg):
    train = dict(steps=steps, batch_size=4, lr=1e-2, warmup=1, eval_every=2, eval_iters=1)
    return tiny_trainer(corpus, out, head, dict(context=8, **TINY), **{**train, **cfg})


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lr", float("nan"), "lr must be a finite number > 0; got nan"),
        ("lr", float("inf"), "lr must be a finite number > 0; got inf"),
        ("lr", 0.0, "lr must be a finite number > 0; got 0.0"),
        ("weight_decay", float("nan"), "weight_decay must be a finite number >= 0; got nan"),
        ("seed", -1, "seed must be an integer >= 0; got -1"),
        ("min_lr_ratio", 1.5, "min_lr_ratio must be a finite number >= 0 and <= 1"),
        ("grad_clip", float("-inf"), "grad_clip must be a finite number >= 0"),
        ("label_smoothing", 1.0, r"label_smoothing must be a finite number >= 0 and < 1"),
        ("steps", 2.5, "steps must be an integer >= 1"),
        ("batch_size", True, "batch_size must be an integer >= 1"),
    ],
)
def test_bad_settings_are_refused_before_training(corpus, field, value, message):
    with pytest.raises(DomainError, match=r"\[train\] " + message):
        _trainer(corpus, **{field: value})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0; got nan"),
        ({"temperature": -1.0}, "temperature must be a finite number >= 0; got -1.0"),
        ({"top_k": -3}, "top_k must be an integer >= 0; got -3"),
        ({"seed": -1}, "seed must be an integer >= 0; got -1"),
    ],
)
def test_bad_sampling_settings_are_refused(corpus, kwargs, message):
    model = GPT(GPTConfig(vocab=corpus.tokenizer.vocab_size, context=8, **TINY), device="cpu")
    with pytest.raises(DomainError, match=r"\[sample\] " + message):
        generate(model, corpus.tokenizer, "A", 3, **kwargs)


class NaNAt:
    """The default loss head, except that the loss at ``step`` is NaN (as a blow-up gives)."""

    def __init__(self, step):
        self.step, self.calls, self.inner = step, 0, CrossEntropyHead()

    def loss_and_backward(self, logits, targets):
        self.calls += 1
        loss = self.inner.loss_and_backward(logits, targets)
        if self.calls == self.step:
            return riftco.tensor(np.float32(np.nan), device=loss.device)
        return loss


def test_nan_loss_stops_with_the_last_good_checkpoint_intact(corpus, tmp_path):
    trainer = _trainer(corpus, tmp_path, steps=8, head=NaNAt(5))
    with pytest.raises(DivergenceError) as info:
        trainer.run(progress=False)
    message = str(info.value)
    assert message.startswith("[train] the training loss is nan at step 5")
    good = load_checkpoint(tmp_path)
    assert good.step == 4 and good.verified  # saved at the step-4 evaluation, untouched
    assert str(good.path) in message and "lower lr" in message
    assert all(np.isfinite(w).all() for w in good.weights.values())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("ckpt-")] == [good.path.name]
    # The good checkpoint continues like a run that never saw the NaN (bit-exact resume).
    resumed = Trainer.resume(tmp_path, device="cpu").run(progress=False)
    reference = _trainer(corpus, None, steps=8).run(progress=False)
    assert resumed.train_losses == reference.train_losses


def test_a_real_blow_up_stops(corpus):
    trainer = _trainer(corpus, None, steps=20, lr=1e30, warmup=0, grad_clip=0.0, eval_every=100)
    with (
        np.errstate(over="ignore", invalid="ignore"),  # numpy's warnings as the numbers blow up
        pytest.raises(DivergenceError, match=r"\[train\] the (training|validation) loss is"),
    ):
        trainer.run(progress=False)
    assert trainer.step < 20
    assert not math.isfinite(trainer.train_losses[-1][1])


def test_non_finite_weights_are_never_saved(corpus, tmp_path):
    trainer = _trainer(corpus, tmp_path, steps=2)
    trainer.run(progress=False)
    first = load_checkpoint(tmp_path).path
    p = next(iter(trainer.model.parameters()))
    bad = p.value.numpy().copy()
    bad.flat[0] = np.inf
    p.assign(riftco.tensor(bad, device="cpu"))
    with pytest.raises(DivergenceError, match=r"holds non-finite values at step 2"):
        trainer.save()
    assert load_checkpoint(tmp_path).path == first


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_saves_and_stops_like_ctrl_c(corpus, tmp_path, signum):
    before = signal.getsignal(signum)

    def deliver(trainer, loss):
        if trainer.step == 3:
            os.kill(os.getpid(), signum)

    result = _trainer(corpus, tmp_path, steps=10, eval_every=100).run(
        progress=False, on_step=deliver
    )
    assert result.interrupted and result.step == 3 and result.stop_signal == signum
    assert load_checkpoint(tmp_path).step == 3
    assert signal.getsignal(signum) == before
