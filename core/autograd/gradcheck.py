"""Compare autograd with centred finite differences in float64 on the CPU backend.

Finite differences are slow and approximate but independent of every backward rule, so
they catch a wrong VJP. For a non-scalar output the check uses a fixed random projection
``sum(u * f(x))``, which tests the full vector-Jacobian product with one backward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..device import device as _device
from ..errors import GradientError
from ..tensor import Tensor
from .graph import Variable


def _host(x: Any, i: int) -> np.ndarray:
    if isinstance(x, Variable):
        x = x.value
    arr = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
    if arr.dtype.kind != "f":
        raise GradientError(f"[gradcheck] input {i} must be floating point; got {arr.dtype}")
    return np.array(arr, dtype=np.float64)


def gradcheck(
    fn: Callable[..., Variable],
    inputs: Sequence[Any],
    eps: float = 1e-6,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    max_elements: int = 512,
    seed: int = 0,
    raise_on_failure: bool = True,
) -> dict[str, Any]:
    """Check ``fn(*inputs)``'s gradient w.r.t. every input (Variables, Tensors or arrays).

    Inputs are copied to float64 CPU Variables. Every element is perturbed for inputs of up
    to ``max_elements`` elements, a seeded random subset of that many otherwise. Returns
    ``{"max_abs_error", "max_rel_error", "worst", "checked"}``; raises GradientError with
    the worst element, the analytic and numeric values when ``atol + rtol*|numeric|`` is
    exceeded (unless ``raise_on_failure=False``)."""
    cpu = _device("cpu").backend
    arrays = [_host(x, i) for i, x in enumerate(inputs)]
    rng = np.random.default_rng(seed)

    def run(values: list[np.ndarray], grad: bool) -> Variable:
        out = fn(*[Variable(cpu.from_numpy(a), requires_grad=grad) for a in values])
        if not isinstance(out, Variable):
            raise GradientError(f"[gradcheck] fn must return a Variable; got {type(out).__name__}")
        return out

    leaves = [Variable(cpu.from_numpy(a), requires_grad=True) for a in arrays]
    out = fn(*leaves)
    if not isinstance(out, Variable):
        raise GradientError(f"[gradcheck] fn must return a Variable; got {type(out).__name__}")
    u = rng.standard_normal(out.shape) if out.size != 1 else np.ones(out.shape)
    out.backward(cpu.from_numpy(u))
    analytic = [
        np.zeros_like(a) if leaf.grad is None else leaf.grad.numpy()
        for a, leaf in zip(arrays, leaves, strict=False)
    ]

    def objective(values: list[np.ndarray]) -> float:
        return float(np.sum(u * run(values, False).numpy().astype(np.float64)))

    worst: dict[str, Any] = {"abs": 0.0, "rel": 0.0, "where": None, "analytic": 0.0, "numeric": 0.0}
    failed = None
    checked = 0
    for i, a in enumerate(arrays):
        flat_ids = np.arange(a.size)
        if a.size > max_elements:
            flat_ids = np.sort(rng.choice(a.size, max_elements, replace=False))
        for flat in flat_ids:
            idx = np.unravel_index(flat, a.shape)
            plus, minus = [v.copy() for v in arrays], [v.copy() for v in arrays]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            numeric = (objective(plus) - objective(minus)) / (2 * eps)
            got = float(analytic[i][idx])
            err = abs(got - numeric)
            rel = err / max(abs(numeric), 1e-12)
            checked += 1
            if err > worst["abs"]:
                worst = {"abs": err, "rel": rel, "where": (i, tuple(int(j) for j in idx)),
                         "analytic": got, "numeric": numeric}  # fmt: skip
            if err > atol + rtol * abs(numeric) and failed is None:
                failed = (i, tuple(int(j) for j in idx), got, numeric, err)
    report = {
        "max_abs_error": worst["abs"],
        "max_rel_error": worst["rel"],
        "worst": worst,
        "checked": checked,
    }
    if failed is not None and raise_on_failure:
        i, at, got, numeric, err = failed
        raise GradientError(
            f"[gradcheck] input {i} (shape {arrays[i].shape}) element {at}: analytic {got:.8g}, "
            f"numeric {numeric:.8g}, error {err:.3g} > atol {atol} + rtol {rtol}*|numeric|; "
            f"largest error {worst['abs']:.3g} at {worst['where']} over {checked} elements"
        )
    return report
