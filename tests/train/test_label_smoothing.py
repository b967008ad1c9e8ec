"""`riftco train --label-smoothing`: a loss head built by riftco.symbolic seeds the network."""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from riftco.autograd import Variable
from riftco.nn import GPT, GPTConfig
from riftco.train.cli import build_train_parser
from riftco.train.data import CharDataset, load_text
from riftco.train.heads import label_smoothing_head
from riftco.train.loop import TrainConfig, Trainer


def _smoothed_ce_numpy(logits: np.ndarray, targets: np.ndarray, eps: float):
    """Mean over rows of -sum(q * log softmax), q = (1-eps) onehot + eps/V; and its gradient."""
    n, v = logits.shape
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    q = np.full((n, v), eps / v)
    q[np.arange(n), targets] += 1.0 - eps
    loss = -(q * logp).sum() / n
    grad = (np.exp(logp) - q) / n
    return loss, grad


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_head_matches_closed_form(eps):
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(12, 7)) * 3
    targets = rng.integers(0, 7, size=12)
    head = label_smoothing_head(7, eps)
    loss, grad = head.loss_and_grad(
        riftco.tensor(logits, dtype="float64"), riftco.tensor(targets.astype(np.int32))
    )
    want_loss, want_grad = _smoothed_ce_numpy(logits, targets, eps)
    assert abs(loss.item() - want_loss) < 1e-10
    np.testing.assert_allclose(grad.numpy(), want_grad, rtol=1e-9, atol=1e-12)


def test_seeded_backward_reaches_the_weights():
    """The compiled d(loss)/d(logits) seeds ordinary backprop: compare with numpy."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(6, 5))
    w0 = rng.normal(size=(5, 4))
    targets = rng.integers(0, 4, size=6)
    w = Variable(riftco.tensor(w0, dtype="float64"), requires_grad=True)
    logits = Variable(riftco.tensor(x, dtype="float64")) @ w
    _, dlogits = label_smoothing_head(4, 0.2).loss_and_grad(
        logits.value, riftco.tensor(targets.astype(np.int32))
    )
    logits.backward(seed=dlogits)
    _, g = _smoothed_ce_numpy(x @ w0, targets, 0.2)
    np.testing.assert_allclose(w.grad.numpy(), x.T @ g, rtol=1e-9, atol=1e-12)


def test_label_smoothing_trains():
    text, source = load_text(None)
    data = CharDataset.from_text(text[:100_000], 16, source)
    cfg = GPTConfig(vocab=data.tokenizer.vocab_size, context=16, layers=1, heads=2, width=32)
    tcfg = TrainConfig(
        steps=40, batch_size=8, lr=1e-2, warmup=5, eval_every=20, eval_iters=2,
        label_smoothing=0.1,
    )  # fmt: skip
    trainer = Trainer(GPT(cfg, device="cpu", seed=0), data, tcfg)
    assert type(trainer.head).__name__ == "SeededHead"
    result = trainer.run(progress=False)
    losses = [loss for _, loss in result.train_losses]
    assert np.mean(losses[-5:]) < losses[0] - 0.7
    # validation reports plain cross-entropy, which must fall well below uniform (log V)
    assert result.val_losses[-1][1] < np.log(data.tokenizer.vocab_size) - 0.8


def test_cli_flag_and_bad_eps():
    args = build_train_parser().parse_args(["--label-smoothing", "0.1"])
    assert args.label_smoothing == 0.1
    with pytest.raises(riftco.ShapeError, match="eps must be in"):
        label_smoothing_head(65, 1.5)
