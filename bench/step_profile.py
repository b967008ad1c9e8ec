"""Where a training step's time goes: ms per step by backend op, riftco beside PyTorch.

riftco's side replays the captured step (``riftco.capture``) with its timing hook, which
times every backend call of the plan; what is left of the step's wall time is host work
(Python, uploads, the loss download). Times are exact on backends whose calls finish
before they return (cpu, native); on kernel backends a call returns once its launches are
queued, so their rows are enqueue time and the wait lands on the call that syncs.

PyTorch's side (when installed) is the same model, weights and batches
(``references.torch_step``) under ``torch.profiler``: self CPU time per aten op.

Both run in this one process, one after the other, with the same thread count.

    python bench/step_profile.py [--backend native] [--configs small,large]
                                 [--modes materialized,flash] [--steps 10] [--top 14]

Writes bench/results/step_profile.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step as ts  # noqa: E402  (first: it sets the BLAS thread count before numpy)

# isort: split
import references as refs  # noqa: E402
import riftco  # noqa: E402
from common import machine, table, write_json  # noqa: E402
from riftco.nn import GPT  # noqa: E402


def riftco_profile(backend: str, config: str, mode: str, steps: int) -> dict[str, Any]:
    """ms per step by protocol method, from the replay's timing hook."""
    cfg, batch = ts.model_config(config, mode)
    batches = ts.make_batches(cfg, batch)
    dev, update, _ = ts.riftco_update(backend, cfg)
    run = riftco.capture(update, warn=False)

    def one(i: int) -> float:
        x, y = batches[i % len(batches)]
        return float(run(riftco.tensor(x, device=dev), riftco.tensor(y, device=dev)).item())

    for i in range(4):  # warm-up, two recordings, a first replay
        one(i)
    if not run.plans:
        raise RuntimeError(f"the step was not replayed: {run.refused or 'no plan'}")
    names = run.plans[0].call_names
    per_op: dict[str, list[float]] = defaultdict(list)
    walls = []
    for i in range(steps):
        run.timing = []
        t0 = time.perf_counter()
        one(i)
        walls.append(time.perf_counter() - t0)
        acc: dict[str, float] = defaultdict(float)
        for name, sec in zip(names, run.timing, strict=True):
            acc[name] += sec
        for name, sec in acc.items():
            per_op[name].append(sec)
    run.timing = None
    counts = defaultdict(int)
    for name in names:
        counts[name] += 1
    rows = [{"op": n, "ms": statistics.median(v) * 1e3, "calls": counts[n]}
            for n, v in per_op.items()]  # fmt: skip
    step_ms = statistics.median(walls) * 1e3
    rows.append({"op": "(host: Python, uploads, loss download)",
                 "ms": step_ms - sum(r["ms"] for r in rows), "calls": 0})  # fmt: skip
    return {"step_ms": step_ms, "rows": rows}


def torch_profile(config: str, steps: int) -> dict[str, Any] | None:
    """Self CPU ms per step by aten op, or None without PyTorch."""
    if refs.torch_version() is None:
        return None
    import torch

    cfg, batch = ts.model_config(config, "materialized")
    weights = GPT(cfg, device="cpu", seed=0).state_dict()
    batches = ts.make_batches(cfg, batch)
    step = refs.torch_step(weights, cfg, batches, ts.LR, ts.WEIGHT_DECAY, ts.THREADS)
    for _ in range(3):
        step()
    walls = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            walls.append(time.perf_counter() - t0)
    rows = [{"op": e.key, "ms": e.self_cpu_time_total / 1e3 / steps, "calls": e.count // steps}
            for e in prof.key_averages() if e.self_cpu_time_total > 0]  # fmt: skip
    return {"step_ms": statistics.median(walls) * 1e3, "rows": rows,
            "note": "wall time under the profiler (it adds overhead per op)"}  # fmt: skip


def show(title: str, prof: dict[str, Any], top: int) -> None:
    rows = sorted(prof["rows"], key=lambda r: -r["ms"])
    total = prof["step_ms"]
    shown = [{"op": r["op"][:44], "ms/step": round(r["ms"], 3), "calls": r["calls"],
              "share": f"{100 * r['ms'] / total:.1f}%"} for r in rows[:top]]  # fmt: skip
    rest = sum(r["ms"] for r in rows[top:])
    if rest:
        shown.append({"op": f"({len(rows) - top} more)", "ms/step": round(rest, 3), "calls": "",
                      "share": f"{100 * rest / total:.1f}%"})  # fmt: skip
    print(f"\n{title}: {total:.2f} ms/step (median)")
    print(table(shown, ["op", "ms/step", "calls", "share"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="native")
    ap.add_argument("--configs", default="small")
    ap.add_argument("--modes", default="materialized,flash")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    host = machine()
    print(f"machine: {host['summary']}; threads {ts.THREADS}")
    out: dict[str, Any] = {"machine": host, "threads": ts.THREADS, "backend": args.backend,
                           "steps": args.steps, "profiles": []}  # fmt: skip
    for config in args.configs.split(","):
        for mode in args.modes.split(","):
            prof = riftco_profile(args.backend, config, mode, args.steps)
            show(f"riftco {args.backend} {config} {mode} (replayed)", prof, args.top)
            out["profiles"].append({"who": "riftco", "config": config, "mode": mode, **prof})
        tprof = None if args.no_torch else torch_profile(config, args.steps)
        if tprof is not None:
            show(f"torch {refs.torch_version()} {config} (sdpa, under the profiler)", tprof,
                 args.top)  # fmt: skip
            out["profiles"].append({"who": "torch", "config": config, "mode": "sdpa", **tprof})
    print(f"\nwrote {write_json('step_profile', out)}")


if __name__ == "__main__":
    main()
