"""One forward + backward of the tiny transformer on a backend vs the CPU float64 reference.

Both models start from the same weights (float32, or float64 on a backend without float32;
the reference gets them cast up), see
the same token batch, and every parameter gradient plus the loss is compared, for both
attention modes. A whole model accumulates every op's error, so the tolerance is looser
than any single op's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from riftco.ops.comparison import compare
from riftco.ops.opunit import Tolerance

from .results import CaseResult

#: A whole model accumulates every op's error; this is looser than any single op.
MODEL_TOLERANCE = Tolerance(1e-3, 1e-3)
#: The vocabulary of the tiny transformer every model check builds (seed 7).
TINY_VOCAB = 13


def model_forward_backward(
    backend: Any, reference: Any
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Return {output name: (backend result, float64 reference)} for loss and gradients."""
    from riftco.ops import upload

    rng = np.random.default_rng(1234)
    ids = rng.integers(0, TINY_VOCAB, size=(2, 10)).astype(index_dtype(backend))
    x, y = ids[:, :-1], ids[:, 1:]
    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for mode in ("materialized", "flash"):
        model, dev = tiny_gpt(backend, mode)
        ref, ref_dev = tiny_gpt(reference, mode, np.dtype(np.float64))
        ref.load_state_dict({k: v.astype(np.float64) for k, v in model.state_dict().items()})
        got = forward_backward(model, upload(dev.backend, x), upload(dev.backend, y))
        want = forward_backward(ref, upload(ref_dev.backend, x), upload(ref_dev.backend, y))
        for name in want:
            pairs[f"{mode}/{name}"] = (got[name], want[name])
    return pairs


def tiny_gpt(backend: Any, mode: str, dtype: np.dtype | None = None) -> tuple[Any, Any]:
    """``(model, device)``: the checks' tiny GPT on ``backend`` in ``dtype`` (default: the
    backend's model dtype) with ``mode`` attention."""
    from riftco.device import Device
    from riftco.nn import GPT, GPTConfig

    dev = Device(backend.name, backend.device_index)
    cfg = GPTConfig(vocab=TINY_VOCAB, context=16, layers=2, heads=2, width=16, attention=mode)
    return GPT(cfg, device=dev, dtype=dtype or model_dtype(backend), seed=7), dev


def index_dtype(backend: Any) -> Any:
    return np.int32 if np.dtype(np.int32) in backend.dtypes else np.int64


def forward_backward(model: Any, x: Any, y: Any) -> dict[str, np.ndarray]:
    """``loss`` and ``grad/NAME`` for every parameter (NaN where none arrived)."""
    loss = model.loss(x, y)
    loss.backward()
    out = {"loss": loss.value.numpy()}
    for name, p in model.named_parameters():
        out[f"grad/{name}"] = p.grad.numpy() if p.grad is not None else np.full(p.shape, np.nan)
    return out


def model_results(backend: Any, reference: Any) -> list[CaseResult]:
    pairs = partial(model_forward_backward, backend, reference)
    return model_case("model/tiny_transformer", "tiny_transformer", backend, pairs)


def model_dtype(backend: Any) -> np.dtype:
    """float32 where the backend has it, else float64; the model checks' tolerance is not
    one for half precision, so a backend with neither skips them (NotImplementedError)."""
    for dt in (np.dtype(np.float32), np.dtype(np.float64)):
        if dt in backend.dtypes:
            return dt
    have = ", ".join(sorted(d.name for d in backend.dtypes))
    raise NotImplementedError(f"the model checks run in float32 or float64; {have} declared")


def model_case(
    cid: str,
    op: str,
    backend: Any,
    make_pairs: Callable[[], dict[str, tuple[np.ndarray, np.ndarray]]],
) -> list[CaseResult]:
    """The case ``cid`` judged on what ``make_pairs`` returns (``{name: (got, float64
    reference)}``); a backend that cannot run the model is a skip with the reason."""
    res = CaseResult(cid, op, "model", "-", "-")
    res.tolerance = MODEL_TOLERANCE.as_dict()
    start = time.perf_counter()
    try:
        res.dtype = model_dtype(backend).name
        pairs = make_pairs()
    except NotImplementedError as exc:
        res.status, res.reason = "skip", f"end-to-end model check not available: {exc}"
        return [res]
    judge(res, pairs)
    res.time_s = time.perf_counter() - start
    return [res]


def judge(res: CaseResult, pairs: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Fill ``res`` from ``{name: (got, float64 reference)}`` at the model tolerance (the
    reason names the first four outputs out of it and counts the rest)."""
    comps = [compare(name, got, exp, MODEL_TOLERANCE) for name, (got, exp) in pairs.items()]
    res.examples = 1
    res.max_abs = max((c.max_abs for c in comps), default=0.0)
    res.max_rel = max((c.max_rel for c in comps), default=0.0)
    res.max_ratio = max((c.max_ratio for c in comps), default=0.0)
    bad = [c for c in comps if not c.ok]
    if bad:
        more = f"; and {len(bad) - 4} more" if len(bad) > 4 else ""
        res.status, res.reason = "fail", "; ".join(c.describe() for c in bad[:4]) + more
    res.details = [c.as_dict() for c in comps]
