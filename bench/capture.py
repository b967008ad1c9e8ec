"""What ``riftco.capture`` saves per training step: eager vs replayed, side by side.

Two identical models (same init, same batches, same AdamW with the clip inside) step in
interleaved blocks, one as written and one through ``riftco.capture``. Per backend and
config it reports ms/step (median), the host time per step (the step's wall time minus
the time spent inside backend methods, measured in separate instrumented steps), backend
calls, kernel launches and host waits (downloads and synchronize) per step, and whether
the two runs' losses were bit-identical.

    python bench/capture.py [--backends cpu,native,opencl] [--configs small,large]
                            [--steps 40] [--block 5]

The Metal backend's host code runs here through its OpenCL stand-in:
``RIFTCO_METAL_STANDIN=1 python bench/capture.py --backends metal``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", str(os.cpu_count() or 1))
os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import riftco  # noqa: E402
from common import machine, table, write_json  # noqa: E402
from riftco.nn import GPT  # noqa: E402
from riftco.ops import units  # noqa: E402
from riftco.optim import AdamW, grad_norm  # noqa: E402
from train_step import available_backends, make_batches, model_config  # noqa: E402

LR, WEIGHT_DECAY, CLIP = 3e-4, 0.1, 1.0
WAITS = ("to_numpy", "synchronize")


class Meter:
    """Time and count a backend's protocol methods (outermost calls only) while active."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.seconds = 0.0
        self.calls = 0
        self.waits = 0
        self.depth = 0

    def __enter__(self) -> Meter:
        names = [u.name for u in units()] + ["allocate", "from_numpy", "fill", *WAITS]
        own = vars(self.backend)
        self.saved = {n: own.get(n) for n in names if callable(getattr(self.backend, n, None))}
        for n in self.saved:
            own[n] = self._wrap(n, getattr(self.backend, n))
        return self

    def __exit__(self, *exc: Any) -> None:
        own = vars(self.backend)
        for n, prev in self.saved.items():
            if prev is None:
                own.pop(n, None)
            else:
                own[n] = prev

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            if self.depth:  # inside a call (or a replay, which times its own): a host
                self.waits += name in WAITS  # wait still counts, its time is the outer's
                return method(*args)
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return method(*args)
            finally:
                self.seconds += time.perf_counter() - t0
                self.depth -= 1
                self.calls += 1
                self.waits += name in WAITS

        return timed


def hide_replay(run: Any, meter: Meter) -> None:
    """A replay times its own calls (``run.timing``); a kernel backend's method calling
    another through ``self`` must not reach the meter as well (counted twice)."""
    for plan in run.plans:
        original = vars(plan).setdefault("_unhidden_replay", plan.replay)

        def replay(*args: Any, _original: Callable[..., Any] = original) -> Any:
            meter.depth += 1
            try:
                return _original(*args)
            finally:
                meter.depth -= 1

        plan.replay = replay


def make_step(backend: str, config: str, captured: bool) -> tuple[Callable[..., float], Any]:
    cfg, batch = model_config(config)
    dev = riftco.device(backend)
    model = GPT(cfg, device=dev, seed=0)
    opt = AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    params = model.parameters()

    def step(x: riftco.Tensor, y: riftco.Tensor, lr: float) -> Any:
        loss = model.loss(x, y)
        loss.backward()
        opt.lr = lr
        opt.step(grad_norm=grad_norm(params), max_norm=CLIP)
        return loss

    run = riftco.capture(step) if captured else step
    batches = make_batches(cfg, batch)
    state = {"i": 0}

    def one() -> float:
        x, y = batches[state["i"] % len(batches)]
        state["i"] += 1
        lr = LR * min(1.0, state["i"] / 10)  # a schedule: the replay refills it
        loss = run(riftco.tensor(x, device=dev), riftco.tensor(y.reshape(-1), device=dev), lr)
        return float(loss.item())

    return one, run


def measure(backend: str, config: str, steps: int, block: int) -> dict[str, Any]:
    be = riftco.device(backend).backend
    variants = {name: make_step(backend, config, name == "captured")
                for name in ("eager", "captured")}  # fmt: skip
    losses: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(4):  # warm-up, two recordings, the first replay
        for name, (one, _) in variants.items():
            losses[name].append(one())
    counts: dict[str, dict[str, Any]] = {}
    for name, (one, _) in variants.items():
        launches = None
        if hasattr(be, "reset_transfer_stats"):
            be.reset_transfer_stats()
        samples, inside = [], []
        run = variants[name][1]
        for _ in range(3):
            with Meter(be) as m:  # eager calls reach the shadows; a replay times itself
                if name == "captured":
                    run.timing = []
                    hide_replay(run, m)
                t0 = time.perf_counter()
                losses[name].append(one())
                total = time.perf_counter() - t0
            samples.append(total)
            if name == "captured":
                inside.append(sum(run.timing) + m.seconds)  # + the loss download
                m.calls += len(run.timing)
                run.timing = None
            else:
                inside.append(m.seconds)
        if hasattr(be, "transfer_stats"):
            launches = be.transfer_stats()["launches"] // 3
        host = statistics.median(t - s for t, s in zip(samples, inside)) * 1e3
        counts[name] = {"calls": m.calls, "waits": m.waits, "launches": launches, "host_ms": host}
    times: dict[str, list[float]] = {k: [] for k in variants}
    done = 0
    names = list(variants)
    while done < steps:
        order = names if (done // block) % 2 == 0 else names[::-1]
        for name in order:
            one = variants[name][0]
            for _ in range(block):
                t0 = time.perf_counter()
                losses[name].append(one())
                times[name].append(time.perf_counter() - t0)
        done += block
    stats = variants["captured"][1].stats
    row: dict[str, Any] = {
        "backend": backend,
        "config": config,
        "bitwise": losses["eager"] == losses["captured"],
        "replayed": stats.replayed,
        "refused": variants["captured"][1].refused,
    }
    for name in names:
        ms = statistics.median(times[name]) * 1e3
        row[f"{name}_ms"] = ms
        row[f"{name}_host_ms"] = counts[name]["host_ms"]
        row[f"{name}_calls"] = counts[name]["calls"]
        row[f"{name}_waits"] = counts[name]["waits"]
        row[f"{name}_launches"] = counts[name]["launches"]
    row["ratio"] = row["captured_ms"] / row["eager_ms"]
    row["host_share_captured"] = row["captured_host_ms"] / row["captured_ms"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default=None, help="comma list (default: every in-tree one)")
    ap.add_argument("--configs", default="small", help="small,large")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--block", type=int, default=5)
    args = ap.parse_args()
    backends = args.backends.split(",") if args.backends else available_backends()
    rows = [measure(b, c, args.steps, args.block)
            for b in backends for c in args.configs.split(",")]  # fmt: skip
    cols = ["backend", "config", "eager_ms", "captured_ms", "ratio", "eager_host_ms",
            "captured_host_ms", "host_share_captured", "eager_calls", "captured_calls",
            "eager_launches", "captured_launches", "eager_waits", "captured_waits",
            "bitwise"]  # fmt: skip
    print(table(rows, cols))
    path = write_json("capture", {"machine": machine(), "rows": rows, "args": vars(args)})
    print(f"\n{machine()['summary']}\nwritten: {path}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
