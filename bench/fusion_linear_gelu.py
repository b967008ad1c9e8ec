"""The GPT MLP's first layer: ``linear`` then ``gelu`` (before) vs one ``linear_gelu`` (after),
interleaved A/B in one run, per backend.

Two measurements, both on ``make train``'s model (4 layers, width 128, 4 heads, context 64,
batch 16, vocab 65):

* the op alone on the fc shape (M = 16 x 64 rows, K = 128, N = 512): forward
  (``linear`` + ``gelu`` vs ``linear_gelu``) and backward (``gelu_backward`` +
  ``linear_backward`` vs ``linear_gelu_backward``), median ms, backend synchronised;
* the whole training step (forward, backward, clipped AdamW; eager, no capture) of two
  models built from the same seed, one whose MLPs run the unfused layer: median ms per step
  over interleaved blocks, launches per step on kernel backends, and whether the two
  models' losses agree bit for bit.

    python bench/fusion_linear_gelu.py [--backends cpu,native,opencl] [--steps 30] [--repeat 40]

Prints a table and the JSON record, and writes bench/results/fusion_linear_gelu.json
(with the CPU model).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import riftco
from riftco import ops
from riftco.autograd import Variable
from riftco.nn import GPT, GPTConfig
from riftco.nn.layers import MLP
from riftco.optim import AdamW, grad_norm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, id_batches, step_ab, table, write_json  # noqa: E402

CFG = GPTConfig(vocab=65, context=64, layers=4, heads=4, width=128)
BATCH, LR, WD, CLIP = 16, 3e-3, 0.1, 1.0


class UnfusedMLP(MLP):
    """The MLP as it was before ``linear_gelu``: fc (bias epilogue), then a GELU pass."""

    def forward(self, x: Variable) -> Variable:
        return self.proj(self.fc(x).gelu(approximate="tanh"))


def _sync(be: Any) -> None:
    sync = getattr(be, "synchronize", None)
    if sync is not None:
        sync()


def interleaved_ms(fns: dict[str, Callable[[], Any]], be: Any, repeat: int) -> dict[str, float]:
    """Median ms per call of each function, calls alternating A B, B A, ... and synced."""
    for fn in fns.values():
        fn()
    _sync(be)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for i in range(repeat):
        for name in names if i % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            fns[name]()
            _sync(be)
            samples[name].append(time.perf_counter() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in samples.items()}


def op_rows(backend: str, repeat: int) -> list[dict[str, Any]]:
    be = riftco.device(backend).backend
    rng = np.random.default_rng(0)
    m, k, n = BATCH * CFG.context, CFG.width, 4 * CFG.width
    t = lambda *s: riftco.tensor(rng.standard_normal(s).astype(np.float32), device=backend)  # noqa: E731
    x, w, b, dy = t(m, k), t(k, n), t(n), t(m, n)
    h = ops.linear(x, w, b)
    fwd = interleaved_ms({
        "before": lambda: ops.gelu(ops.linear(x, w, b), "tanh"),
        "after": lambda: ops.linear_gelu(x, w, b, "tanh"),
    }, be, repeat)  # fmt: skip
    bwd = interleaved_ms({
        "before": lambda: ops.linear_backward(ops.gelu_backward(dy, h, "tanh"), x, w),
        "after": lambda: ops.linear_gelu_backward(dy, x, w, h, "tanh"),
    }, be, repeat)  # fmt: skip
    return [{"backend": backend, "what": f"op {name} {m}x{k}x{n}", "before_ms": r["before"],
             "after_ms": r["after"], "ratio": r["after"] / r["before"]}
            for name, r in (("forward", fwd), ("backward", bwd))]  # fmt: skip


class Variant:
    """One model and its optimizer; ``fused=False`` swaps every MLP for the unfused one."""

    def __init__(self, backend: str, fused: bool) -> None:
        self.dev = riftco.device(backend)
        self.be = self.dev.backend
        self.model = GPT(CFG, device=self.dev, seed=0)
        if not fused:
            for block in self.model.blocks:
                block.mlp.__class__ = UnfusedMLP
        self.params = list(self.model.parameters())
        self.opt = AdamW(self.params, lr=LR, weight_decay=WD)
        self.losses: list[float] = []

    def step(self, x: np.ndarray, y: np.ndarray) -> None:
        loss = self.model.loss(riftco.tensor(x, device=self.dev), riftco.tensor(y, device=self.dev))
        loss.backward()
        self.opt.step(grad_norm=grad_norm(self.params), max_norm=CLIP)
        self.losses.append(float(loss.item()))  # a download: the step has finished


def step_row(backend: str, steps: int, block: int) -> dict[str, Any]:
    batches = id_batches(CFG.vocab, BATCH, CFG.context)
    a, b = Variant(backend, fused=False), Variant(backend, fused=True)
    counts, times = step_ab(a, b, batches, steps, block)
    before, after = (1e3 * statistics.median(times[k]) for k in ("before", "after"))
    return {"backend": backend, "what": "train step (eager)", "before_ms": before,
            "after_ms": after, "ratio": after / before,
            "launches_before": counts["before"], "launches_after": counts["after"],
            "losses_bitwise_equal": a.losses == b.losses}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--backends", default="cpu,native,opencl")
    ap.add_argument("--steps", type=int, default=30, help="timed training steps per variant")
    ap.add_argument("--block", type=int, default=5, help="steps per interleaved block")
    ap.add_argument("--repeat", type=int, default=40, help="timed calls per op variant")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for backend in args.backends.split(","):
        entry = riftco.get_registry().entries.get(backend.split(":")[0])
        if entry is None or not entry.available:
            print(f"{backend}: skipped ({entry.reason if entry else 'unknown backend'})")
            continue
        rows += op_rows(backend, args.repeat)
        rows.append(step_row(backend, args.steps, args.block))
    cols = ["backend", "what", "before_ms", "after_ms", "ratio", "launches_before",
            "launches_after", "losses_bitwise_equal"]  # fmt: skip
    print(table(rows, cols))
    record = {"cpu": cpu_model(), "cores": os.cpu_count(), "threads":
              os.environ.get("OMP_NUM_THREADS"), "args": vars(args), "rows": rows}  # fmt: skip
    path = write_json("fusion_linear_gelu", record)
    print(json.dumps(record, indent=2))
    print(f"{record['cpu']}, {record['cores']} cores; written {path}")


if __name__ == "__main__":
    main()
