"""Text generation: forward the whole window for each new token, sample on the host.

No KV cache: the model is small and a window of ``context`` tokens is cheap to recompute.
Only the last position's logits come back to the host, where sampling runs in float64
with a seeded numpy Generator, so a given seed yields the same text on a given backend.
"""

from __future__ import annotations

import numpy as np

from .. import creation
from ..autograd import no_grad
from ..nn import GPT
from .checks import COUNT, NON_NEGATIVE
from .tokenizer import CharTokenizer, DataError


def sample_next(
    logits: np.ndarray, rng: np.random.Generator, temperature: float, top_k: int | None
) -> int:
    """One id from last-position ``logits`` ``(V,)``; temperature 0 means greedy."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits / temperature
    if top_k is not None and 0 < top_k < z.size:
        kth = np.partition(z, -top_k)[-top_k]
        z = np.where(z < kth, -np.inf, z)
    p = np.exp(z - z.max())
    p /= p.sum()
    # Inverse CDF with one uniform draw: stable across numpy versions, unlike choice().
    return int(min(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right"), z.size - 1))


def generate(
    model: GPT,
    tokenizer: CharTokenizer,
    prompt: str,
    tokens: int,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
) -> str:
    """``prompt`` followed by ``tokens`` sampled characters."""
    if tokens < 0:
        raise DataError(f"[sample] tokens must be >= 0; got {tokens}")
    NON_NEGATIVE.check("sample", "temperature", temperature)  # NaN would sample garbage
    COUNT.check("sample", "seed", seed)
    if top_k is not None:
        COUNT.check("sample", "top_k", top_k)
    if not prompt:
        prompt = "\n" if "\n" in tokenizer.chars else tokenizer.chars[0]
    ids = list(tokenizer.encode(prompt))
    rng = np.random.default_rng(seed)
    context = model.config.context
    for _ in range(tokens):
        window = np.asarray(ids[-context:], dtype=np.int32)[None, :]  # (1, T)
        idx = creation.tensor(window, device=model.device)
        with no_grad():
            logits = model.last_logits(idx).value.numpy()[0]  # (V,)
        ids.append(sample_next(logits, rng, temperature, top_k))
    return tokenizer.decode(ids)
