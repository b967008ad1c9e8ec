"""Float64 references for the fused-kernel tests, written from the definitions.

Independent of the CPU backend's code on purpose: both the kernels and the reference
backend are checked against these.
"""

from __future__ import annotations

import math

import numpy as np

ERF = np.vectorize(math.erf, otypes=[np.float64])


def gelu_ref(x: np.ndarray, form: str) -> tuple[np.ndarray, np.ndarray]:
    x = x.astype(np.float64)
    if form == "tanh":
        c = math.sqrt(2.0 / math.pi)
        u = c * (x + 0.044715 * x**3)
        th = np.tanh(u)
        dydx = 0.5 * (1 + th) + 0.5 * x * (1 - th**2) * c * (1 + 3 * 0.044715 * x**2)
        return 0.5 * x * (1 + th), dydx
    cdf = 0.5 * (1 + ERF(x / math.sqrt(2.0)))
    return x * cdf, cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def softmax_ref(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def attention_ref(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, scale: float, causal: bool
) -> dict[str, np.ndarray]:
    """Forward and VJP in float64, straight from the definitions (dense [T, T] math)."""
    q, k, v, do = (a.astype(np.float64) for a in (q, k, v, do))
    t = q.shape[-2]
    s = scale * np.einsum("bhid,bhjd->bhij", q, k)
    mask = np.triu(np.ones((t, t), bool), 1) if causal else np.zeros((t, t), bool)
    s = np.where(mask, -np.inf, s)
    lse = np.log(np.sum(np.exp(s - s.max(-1, keepdims=True)), -1)) + s.max(-1)
    p = np.exp(s - lse[..., None])
    out = p @ v
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - np.sum(do * out, -1, keepdims=True))
    return {
        "out": out, "probs": p, "lse": lse, "dv": np.swapaxes(p, -1, -2) @ do,
        "dq": scale * ds @ k, "dk": scale * np.swapaxes(ds, -1, -2) @ q,
    }  # fmt: skip
