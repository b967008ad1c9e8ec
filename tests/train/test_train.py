"""The training loop end to end on tiny configs: learning, exact resume, Ctrl-C, sampling,
the pluggable loss head and the two CLI commands."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

riftco = pytest.importorskip("riftco")
pytest.importorskip("riftco.optim", reason="optimizers not built yet")

from riftco.nn import GPT, GPTConfig  # noqa: E402
from riftco.train.cli import sample_main, train_main  # noqa: E402
from riftco.train.data import CharDataset, load_text  # noqa: E402
from riftco.train.loop import Trainer  # noqa: E402
from riftco.train.sample import generate, sample_next  # noqa: E402
from train_helpers import tiny_trainer  # noqa: E402

TINY = dict(layers=1, heads=2, width=32)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "shakespeare-head.txt"
    path.write_text(load_text(None)[0][:200_000], encoding="utf-8")
    text, source = load_text(path)
    data = CharDataset.from_text(text, 16, source)
    data.path = str(path)
    return data


def _trainer(corpus, out=None, steps=50, head=None, **cfg):
    train = dict(steps=steps, batch_size=8, lr=1e-2, warmup=5, eval_every=4, eval_iters=2)
    return tiny_trainer(corpus, out, head, dict(context=16, **TINY), **{**train, **cfg})


def test_loss_decreases(corpus):
    result = _trainer(corpus, steps=50).run(progress=False)
    losses = [loss for _, loss in result.train_losses]
    assert len(losses) == 50
    assert abs(losses[0] - np.log(65)) < 0.3  # a fresh model is close to uniform
    assert np.mean(losses[-10:]) < losses[0] - 1.0
    assert result.val_losses[-1][1] < result.val_losses[0][1] - 0.8


def test_resume_is_bit_exact(corpus, tmp_path):
    full = _trainer(corpus, tmp_path / "full", steps=10).run(progress=False)

    def stop_at_6(trainer, loss):
        return trainer.step == 6

    part = _trainer(corpus, tmp_path / "part", steps=10).run(progress=False, on_step=stop_at_6)
    assert part.interrupted and part.step == 6 and part.checkpoint is not None
    resumed = Trainer.resume(tmp_path / "part", device="cpu").run(progress=False)
    assert resumed.step == 10 and not resumed.interrupted
    assert resumed.train_losses == full.train_losses  # bit for bit, including steps 7..10
    assert resumed.val_losses == full.val_losses
    a = riftco.train.checkpoint.load_checkpoint(tmp_path / "full").weights
    b = riftco.train.checkpoint.load_checkpoint(tmp_path / "part").weights
    assert all(np.array_equal(a[k], b[k]) for k in a)


class _Bar:
    """A progress object that keeps what the trainer shows."""

    def __init__(self):
        self.stats = []

    def update(self, step, stats):
        self.stats.append((step, stats))

    def close(self):
        pass


def test_each_reported_loss_says_what_it_is(corpus):
    """One step's loss, a mean over steps and a validation loss are three numbers: every
    line names which one it shows (it used to print three "train loss" values for one step)."""
    seen, lines, bar = [], [], _Bar()
    result = _trainer(corpus, steps=6, eval_every=3).run(
        progress=bar, log=lines.append, on_step=lambda t, loss: seen.append(loss)
    )
    vals = [v for _, v in result.val_losses]
    assert lines == [
        f"step 3: train loss {np.mean(seen[:3]):.3f} (mean of steps 1-3), "
        f"val loss {vals[0]:.3f} (held-out batches)",
        f"step 6: train loss {np.mean(seen[3:]):.3f} (mean of steps 4-6), "
        f"val loss {vals[1]:.3f} (held-out batches)",
    ]
    assert bar.stats[0][1].startswith(f"step loss {seen[0]:.3f}, ")  # no validation yet
    assert bar.stats[3][1].startswith(f"step loss {seen[3]:.3f}, val loss {vals[0]:.3f} (step 3)")
    assert result.final_train_loss == pytest.approx(np.mean(seen))
    assert result.final_train_loss_label == "mean of steps 1-6"
    assert result.final_val_loss_label == "validation at step 6"


def test_ctrl_c_saves_a_checkpoint(corpus, tmp_path):
    before = signal.getsignal(signal.SIGINT)  # pytest-xdist workers ignore SIGINT

    def interrupt(trainer, loss):
        if trainer.step == 3:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C delivers

    result = _trainer(corpus, tmp_path, steps=10, eval_every=100).run(
        progress=False, on_step=interrupt
    )
    assert result.interrupted and result.step == 3
    ckpt = riftco.train.checkpoint.load_checkpoint(tmp_path)
    assert ckpt.step == 3 and len(ckpt.meta["train_losses"]) == 3
    assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is back


class NumpyCrossEntropy:
    """An external objective: returns the loss and d(loss)/d(logits), computed in numpy."""

    def __init__(self):
        self.calls = 0

    def loss_and_grad(self, logits, targets):
        self.calls += 1
        z = logits.numpy().astype(np.float64)
        t = targets.numpy()
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        loss = -np.log(p[np.arange(len(t)), t]).mean()
        p[np.arange(len(t)), t] -= 1.0
        dev = logits.device
        return (
            riftco.tensor(np.float32(loss), device=dev),
            riftco.tensor((p / len(t)).astype(np.float32), device=dev),
        )


def test_pluggable_loss_head_seeds_backward(corpus):
    head = NumpyCrossEntropy()
    seeded = _trainer(corpus, steps=5, head=head).run(progress=False)
    default = _trainer(corpus, steps=5).run(progress=False)
    assert head.calls == 5
    got = [loss for _, loss in seeded.train_losses]
    want = [loss for _, loss in default.train_losses]
    np.testing.assert_allclose(got, want, rtol=1e-4)  # same model, same steps
    assert got[-1] < got[0]


def test_sample_next_follows_softmax_and_top_k():
    logits = np.array([2.0, 1.0, 0.0, -1.0, 0.5])
    rng = np.random.default_rng(0)
    draws = np.array([sample_next(logits, rng, 1.0, None) for _ in range(20000)])
    p = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(np.bincount(draws, minlength=5) / draws.size, p, atol=0.015)
    top2 = {sample_next(logits, rng, 1.0, 2) for _ in range(500)}
    assert top2 == {0, 1}
    assert sample_next(logits, rng, 0.0, None) == 0  # temperature 0: greedy
    cold = [sample_next(logits, rng, 0.05, None) for _ in range(200)]
    assert set(cold) == {0}


def test_generation_is_deterministic(corpus):
    model = GPT(GPTConfig(vocab=corpus.tokenizer.vocab_size, context=16, **TINY), device="cpu")
    a = generate(model, corpus.tokenizer, "ROMEO:", 30, seed=5)
    b = generate(model, corpus.tokenizer, "ROMEO:", 30, seed=5)
    c = generate(model, corpus.tokenizer, "ROMEO:", 30, seed=6)
    assert a == b and a != c
    assert a.startswith("ROMEO:") and len(a) == 36


def test_cli_train_then_sample(tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "--backend",
        "cpu",
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--context",
        "8",
        "--layers",
        "1",
        "--heads",
        "1",
        "--width",
        "16",
        "--eval-every",
        "2",
        "--eval-iters",
        "1",
        "--out",
        str(out),
        "--no-progress",
        "--sample-tokens",
        "20",
    ]
    assert train_main(args) == 0
    text = capsys.readouterr().out
    assert "summary: 4 steps" in text and "backend cpu:0" in text and "--- sample ---" in text
    assert (out / "loss.png").exists() or "pip install 'riftco[plot]'" in text
    assert (
        train_main(
            [
                "--resume",
                str(out),
                "--no-progress",
                "--steps",
                "6",
                "--sample-tokens",
                "0",
                "--backend",
                "cpu",
            ]
        )
        == 0
    )
    assert "summary: 6 steps" in capsys.readouterr().out
    sample = ["--checkpoint", str(out), "--prompt", "KING", "--tokens", "25", "--seed", "3"]
    assert sample_main(sample) == 0
    first = capsys.readouterr().out
    assert sample_main(sample) == 0
    assert capsys.readouterr().out == first and first.startswith("KING")
    assert sample_main(["--checkpoint", str(tmp_path)]) == 2
    assert "holds no checkpoint" in capsys.readouterr().err


def test_cli_reports_bad_data(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xc3\x28 not utf-8")
    assert train_main(["--backend", "cpu", "--data", str(bad), "--out", str(tmp_path)]) == 2
    assert "not valid UTF-8" in capsys.readouterr().err
