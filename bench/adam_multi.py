"""Clipped AdamW: a scaling pass then one update per parameter (before) vs one
``adam_update_multi`` call with the clip scale inside (after), interleaved A/B in one run.

The model is ``riftco train``'s default (4 layers, width 128, 4 heads, context 64, batch
16, vocab 65); both variants start from the same weights and see the same batches, so
their losses must agree bit for bit. Per backend it reports launches per training step
(kernel backends count ``transfer_stats()``), median ms per step over interleaved blocks,
and the median ms of the optimizer part alone (clip + AdamW, synchronised around it).

    python bench/adam_multi.py [--backends native,opencl,metal] [--steps 30] [--block 5]

The Metal backend runs on its OpenCL stand-in here (RIFTCO_METAL_STANDIN=1 is set when no
Mac is found). Writes bench/results/adam_multi.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RIFTCO_METAL_STANDIN", "1")
import numpy as np  # noqa: E402
import riftco  # noqa: E402
from riftco import ops  # noqa: E402
from riftco.nn import GPT, GPTConfig  # noqa: E402
from riftco.optim import AdamW, clip_grad_norm, grad_norm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, id_batches, step_ab  # noqa: E402

CFG = GPTConfig(vocab=65, context=64, layers=4, heads=4, width=128)
BATCH, LR, WD, CLIP = 16, 3e-3, 0.1, 1.0


class Variant:
    """One model and its optimizer; ``fused`` picks the step's optimizer path."""

    def __init__(self, backend: str, fused: bool) -> None:
        self.dev = riftco.device(backend)
        self.be = self.dev.backend
        self.model = GPT(CFG, device=self.dev, seed=0)
        self.params = list(self.model.parameters())
        self.opt = AdamW(self.params, lr=LR, weight_decay=WD)
        self.fused = fused
        self.losses: list[float] = []
        self.opt_s: list[float] = []

    def optimizer(self) -> None:
        if self.fused:
            self.opt.step(grad_norm=grad_norm(self.params), max_norm=CLIP)
            return
        clip_grad_norm(self.params, CLIP)  # before: a scaling pass, then tensor by tensor
        b1, b2 = self.opt.betas
        for i, p in enumerate(self.params):
            st = self.opt.state[i]
            if st is None:
                st = self.opt.state[i] = {"m": ops.full_like(p.value, 0.0),
                                          "v": ops.full_like(p.value, 0.0), "step": 0}  # fmt: skip
            st["step"] += 1
            assert p.grad is not None
            ops.adam_update(p.value, p.grad, st["m"], st["v"], LR, b1, b2, self.opt.eps, WD,
                            st["step"])  # fmt: skip

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        loss = self.model.loss(riftco.tensor(x, device=self.dev), riftco.tensor(y, device=self.dev))
        loss.backward()
        sync = getattr(self.be, "synchronize", None)
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        self.optimizer()
        if sync is not None:
            sync()
        self.opt_s.append(time.perf_counter() - t0)
        value = float(loss.item())
        self.losses.append(value)
        return value


def run(backend: str, steps: int, block: int) -> dict[str, Any]:
    batches = id_batches(CFG.vocab, BATCH, CFG.context)
    a, b = Variant(backend, fused=False), Variant(backend, fused=True)
    counts, times = step_ab(a, b, batches, steps, block)
    same = a.losses == b.losses
    diff = max(abs(x - y) for x, y in zip(a.losses, b.losses, strict=True))
    out: dict[str, Any] = {"backend": backend, "launches_per_step": counts,
                           "losses_bitwise_equal": same, "max_loss_diff": diff}  # fmt: skip
    for name, v in (("before", a), ("after", b)):
        out[f"{name}_ms_per_step"] = 1e3 * statistics.median(times[name])
        out[f"{name}_optimizer_ms"] = 1e3 * statistics.median(v.opt_s[2:])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="native,opencl,metal")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--block", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for backend in args.backends.split(","):
        entry = riftco.get_registry().entries.get(backend.split(":")[0])
        if entry is None or not entry.available:
            print(f"{backend}: skipped ({entry.reason if entry else 'unknown'})")
            continue
        r = run(backend, args.steps, args.block)
        rows.append(r)
        c = r["launches_per_step"]
        agree = (
            "bitwise equal" if r["losses_bitwise_equal"] else f"max diff {r['max_loss_diff']:.3g}"
        )
        print(f"{backend:8s} launches/step {c['before']} -> {c['after']}; ms/step "
              f"{r['before_ms_per_step']:.1f} -> {r['after_ms_per_step']:.1f}; optimizer ms "
              f"{r['before_optimizer_ms']:.2f} -> {r['after_optimizer_ms']:.2f}; losses "
              f"{agree}")  # fmt: skip
    record = {"cpu": cpu_model(), "cores": os.cpu_count(), "steps": args.steps, "rows": rows}
    path = Path(__file__).resolve().parent / "results" / "adam_multi.json"
    path.write_text(json.dumps(record, indent=2))
    print(f"{record['cpu']}, {record['cores']} cores; written {path}")


if __name__ == "__main__":
    main()
