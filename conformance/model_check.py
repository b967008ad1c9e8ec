"""HOOK: one forward + backward of the tiny transformer vs the CPU float64 reference.

====================================================================================
TODO(riftco.nn): this is the marked hook for the end-to-end model check. It reports a
skip (with its reason) until ``riftco.nn`` provides the tiny transformer. To enable it,
implement :func:`model_forward_backward` below: build a small model from a fixed seed on
``backend`` (float32) and on ``reference`` (float64, the same initial weights copied
with ``.to()`` + cast), run one forward + backward on the same token batch, and return
``{name: (got, expected)}`` numpy pairs for the loss and every parameter gradient. The
comparison and reporting below already work on that dict.
====================================================================================
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .compare import compare
from .results import CaseResult
from .tolerances import Tolerance

#: A whole model accumulates every op's error; this is looser than any single op.
MODEL_TOLERANCE = Tolerance(1e-3, 1e-3)


def model_forward_backward(
    backend: Any, reference: Any
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Return {output name: (backend result, float64 reference)}; raise NotImplementedError
    while the tiny transformer does not exist."""
    raise NotImplementedError("riftco.nn does not provide the tiny transformer yet")


def model_results(backend: Any, reference: Any) -> list[CaseResult]:
    res = CaseResult("model/tiny_transformer", "tiny_transformer", "model", "float32", "-")
    res.tolerance = MODEL_TOLERANCE.as_dict()
    start = time.perf_counter()
    try:
        pairs = model_forward_backward(backend, reference)
    except NotImplementedError as exc:
        res.status, res.reason = "skip", f"end-to-end model check not available: {exc}"
        return [res]
    comps = [compare(name, got, exp, MODEL_TOLERANCE) for name, (got, exp) in pairs.items()]
    res.examples = 1
    res.max_abs = max((c.max_abs for c in comps), default=0.0)
    res.max_rel = max((c.max_rel for c in comps), default=0.0)
    bad = [c for c in comps if not c.ok]
    if bad:
        res.status, res.reason = "fail", "; ".join(c.describe() for c in bad)
    res.details = [c.as_dict() for c in comps]
    res.time_s = time.perf_counter() - start
    return [res]
