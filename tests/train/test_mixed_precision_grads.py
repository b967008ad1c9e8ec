"""Mixed-precision gradients against the float64 reference of the same model and batch.

The step's float32 master gradients (float16 or bfloat16 compute, the cast VJP back to
float32, fp16's scale and unscale) are compared, per parameter, with the gradients of the
same weights computed in float64 throughout. Tolerance, normwise per parameter:
``||g - g64|| <= K u ||g64||`` with ``u`` the compute dtype's unit roundoff (2^-11 float16,
2^-8 bfloat16). Each op rounds its output once (its specification), so the error is a sum of
roundings: the one-layer model's longest path has ~13 rounded outputs forward (weight
copies, embedding sum, LayerNorm, qkv, attention probabilities and output, projection,
add + LayerNorm, linear+GELU, projection, add + LayerNorm, head) and as many backward, each
perturbing its result by at most ``u`` relative; with LayerNorm and softmax Jacobians of
norm ~1 on these O(1) activations the first-order bound is ~26u, and K = 32 leaves room
for the second-order terms. A missing unscale (x 2^16), a gradient on the wrong parameter
or a copy that skipped the cast's VJP fails by orders of magnitude.
"""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from riftco.nn import GPT
from riftco.train.heads import label_smoothing_head
from riftco.train.precision import compute_copies
from train_helpers import tiny_device_trainer

UNIT_ROUNDOFF = {"fp16-mixed": 2.0**-11, "bf16-mixed": 2.0**-8}
K = 32
BF16 = pytest.mark.skipif(
    riftco.dtypes.bfloat16 is None, reason="bfloat16 comes from ml_dtypes (riftco[bfloat16])"
)
PRECISIONS = [pytest.param("bf16-mixed", marks=BF16), "fp16-mixed"]


def _first_step(prec: str, recompute: str = "none", **train):
    """The trainer after one step (its first batch) with the masters of before it."""
    trainer = tiny_device_trainer("cpu", "materialized", precision=prec, **train)
    trainer.model.config.recompute = recompute
    masters = trainer.model.state_dict()
    rng = np.random.default_rng(trainer.cfg.seed)  # the trainer's batch generator, replayed
    x, y = trainer.data.batch("train", trainer.cfg.batch_size, trainer.model.config.context, rng)
    trainer.cfg.steps = 1
    trainer.run(progress=False)
    assert trainer.scaler is None or trainer.scaler.skipped == 0
    return trainer, masters, x, y


def _float64_grads(trainer, masters, x, y, eps: float = 0.0) -> dict[str, np.ndarray]:
    """The same weights and batch in float64 throughout (``eps`` > 0: the label-smoothing
    objective's float64 loss and gradient seed the network instead of cross_entropy)."""
    model = GPT(trainer.model.config, device="cpu", dtype=np.float64)
    model.load_state_dict({k: v.astype(np.float64) for k, v in masters.items()})
    ids, targets = riftco.tensor(x, device="cpu"), riftco.tensor(y, device="cpu")
    if eps == 0.0:
        model.loss(ids, targets).backward()
    else:
        logits = model(ids)
        objective = label_smoothing_head(model.config.vocab, eps)
        logits.backward(seed=objective.loss_and_grad(logits.value, targets.reshape(-1))[1])
    return {name: p.grad.numpy() for name, p in model.named_parameters()}


@pytest.mark.parametrize(
    "recompute, eps",
    [("none", 0.0), ("block", 0.0), ("none", 0.1)],
    ids=["ce", "recompute", "smoothed"],
)
@pytest.mark.parametrize("prec", PRECISIONS)
def test_master_gradients_match_float64(prec, recompute, eps):
    """``smoothed``: the label-smoothing objective (a compiled riftco.symbolic head) gets
    the half logits in float32 and its gradient seeds the half network."""
    trainer, masters, x, y = _first_step(prec, recompute, label_smoothing=eps)
    want = _float64_grads(trainer, masters, x, y, eps)
    tol = K * UNIT_ROUNDOFF[prec]
    worst = []
    for name, p in trainer.model.named_parameters():
        got = p.grad.numpy()
        assert got.dtype == np.float32, name  # the gradient lands on the float32 master
        err = np.linalg.norm(got.astype(np.float64) - want[name]) / np.linalg.norm(want[name])
        worst.append((err, name))
    err, name = max(worst)
    assert err <= tol, f"{name}: relative error {err:.3g} > {tol:.3g} ({prec})"


@pytest.mark.parametrize("prec", PRECISIONS)
def test_the_model_runs_on_the_copies_and_gets_its_masters_back(prec):
    trainer = tiny_device_trainer("cpu", "materialized", precision=prec)
    model, dtype = trainer.model, trainer.precision.compute
    masters = [p for _, p in model.named_parameters()]
    ids = riftco.tensor(np.zeros((1, 4), np.int64), device="cpu")
    with compute_copies(model, dtype):
        assert {p.dtype for _, p in model.named_parameters()} == {dtype}
        assert model(ids).dtype == dtype
    assert all(a is b for a, b in zip(masters, [p for _, p in model.named_parameters()]))
    assert {p.dtype for p in masters} == {np.dtype(np.float32)}
