"""Training steps of the tiny transformer: what one forward and backward cannot show.

A training step writes the weights in place (the backend's own AdamW kernel) and the next
step reads them again from the same buffers. A backend that keys something on a buffer
(a weight packed once per pointer, a cached binding) is right on every single call the
op cases make, since each gets fresh buffers, and wrong from a model's second step on.
Two cases:

* ``model/tiny_transformer_training``: three clipped AdamW steps on the backend; before
  each, the float64 CPU reference takes the backend's current weights (downloaded), so the
  step's loss and gradients compare a forward and backward that must read the weights the
  backend wrote in place, with the one-step model check's tolerance. (The optimizer's own
  arithmetic is the adam op cases' business: comparing two independently updated models
  would mostly measure float32 against float64 Adam.) float64 where there is no float32.
* ``capture/tiny_transformer_training``: five such steps as written and five through
  ``riftco.capture`` (warm-up, two recordings, two replays, each on its own batch), from
  the same weights: every loss and the final weights and optimizer moments bit for bit.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import numpy as np

from .model_check import (
    TINY_VOCAB,
    forward_backward,
    index_dtype,
    model_case,
    model_dtype,
    tiny_gpt,
)
from .results import CaseResult
from .runner import _same_bits

MODES = ("materialized", "flash")
LR, WEIGHT_DECAY, MAX_NORM = 0.02, 0.1, 1.0


def _batches(backend: Any, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(4321)
    ids = rng.integers(0, TINY_VOCAB, size=(n, 2, 10)).astype(index_dtype(backend))
    return [(b[:, :-1], b[:, 1:]) for b in ids]


def _optimizer(model: Any) -> Any:
    from riftco.optim import AdamW

    return AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)


def _clipped_step(model: Any, opt: Any) -> None:
    from riftco.optim import grad_norm

    opt.step(grad_norm=grad_norm(model.parameters()), max_norm=MAX_NORM)


def training_pairs(backend: Any, reference: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{name: (backend, float64 reference)} for each step's loss and gradients."""
    from riftco.ops import upload

    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for mode in MODES:
        model, dev = tiny_gpt(backend, mode)
        ref, ref_dev = tiny_gpt(reference, mode, np.dtype(np.float64))
        opt = _optimizer(model)
        for step, (x, y) in enumerate(_batches(backend, 3)):
            ref.load_state_dict({k: v.astype(np.float64) for k, v in model.state_dict().items()})
            got = forward_backward(model, upload(dev.backend, x), upload(dev.backend, y))
            want = forward_backward(ref, upload(ref_dev.backend, x), upload(ref_dev.backend, y))
            for name in want:
                pairs[f"{mode}/step{step}/{name}"] = (got[name], want[name])
            _clipped_step(model, opt)
    return pairs


def training_results(backend: Any, reference: Any) -> list[CaseResult]:
    pairs = partial(training_pairs, backend, reference)
    cid, op = "model/tiny_transformer_training", "tiny_transformer_training"
    return model_case(cid, op, backend, pairs)


def replay_runs(backend: Any, mode: str, steps: int = 5) -> tuple[list[dict[str, Any]], Any]:
    """The step run ``steps`` times as written and through ``capture``: per run, its
    losses and final state; and the capture (its stats and refusal)."""
    import riftco
    from riftco.ops import upload

    runs = []
    the_capture: Any = None
    for captured in (False, True):
        model, dev = tiny_gpt(backend, mode)
        opt = _optimizer(model)

        def update(x: Any, y: Any, model: Any = model, opt: Any = opt) -> Any:
            loss = model.loss(x, y)
            loss.backward()
            _clipped_step(model, opt)
            return loss

        cap = riftco.capture(update, warn=False) if captured else None
        run = cap if cap is not None else update
        losses = [
            run(upload(dev.backend, x), upload(dev.backend, y)).numpy()
            for x, y in _batches(backend, steps)
        ]
        state = {f"param/{k}": v for k, v in model.state_dict().items()}
        for i, s in enumerate(opt.state):
            for key, value in (s or {}).items():
                if hasattr(value, "numpy"):
                    state[f"opt/{i}/{key}"] = value.numpy()
        runs.append({**{f"loss/step{i}": v for i, v in enumerate(losses)}, **state})
        if cap is not None:
            the_capture = cap
    return runs, the_capture


def capture_training_results(backend: Any) -> list[CaseResult]:
    res = CaseResult("capture/tiny_transformer_training", "tiny_transformer_training", "capture")
    start = time.perf_counter()
    try:
        res.dtype = model_dtype(backend).name
        for mode in MODES:
            (eager, replay), cap = replay_runs(backend, mode)
            res.examples += 1
            if cap.stats.replayed < 2:
                why = cap.refused or "no plan after three calls"
                res.status = "fail"
                res.reason = f"{mode}: {cap.stats.replayed} of 5 steps replayed, not 2: {why}"
                break
            bad = [k for k in eager if k not in replay or not _same_bits(eager[k], replay[k])]
            if bad:
                res.status = "fail"
                more = f" and {len(bad) - 6} more" if len(bad) > 6 else ""
                what = ", ".join(bad[:6]) + more
                res.reason = f"{mode}: the replayed steps differ from the eager ones in {what}"
                break
    except NotImplementedError as exc:
        res.status, res.reason = "skip", f"end-to-end training check not available: {exc}"
    res.time_s = time.perf_counter() - start
    return [res]
