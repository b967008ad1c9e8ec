"""Learning-rate schedule: linear warm-up, then cosine decay to a floor (as in nanoGPT).

Warm-up keeps AdamW's first, badly-estimated second moments from taking huge steps; the
cosine tail lets the last steps settle. A pure function of the step, so a resumed run
needs nothing but the step count to continue the same curve.
"""

from __future__ import annotations

import math


def lr_at(step: int, base_lr: float, warmup: int, total: int, min_ratio: float = 0.1) -> float:
    """Learning rate for 0-based ``step`` of a ``total``-step run."""
    if step < warmup:
        return base_lr * (step + 1) / warmup
    min_lr = base_lr * min_ratio
    if step >= total:
        return min_lr
    span = max(total - warmup, 1)
    progress = (step - warmup) / span
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (base_lr - min_lr)
