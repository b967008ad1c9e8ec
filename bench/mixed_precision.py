"""Mixed-precision training vs fp32: `make train`'s model, the same steps, side by side.

For each backend, three trainers (fp32, bf16-mixed, fp16-mixed) of `make train`'s model
(its defaults: batch 16 x 64 characters, 4 layers, 4 heads, width 128, AdamW at 3e-3 with
50 warm-up steps and a cosine over the run, gradient clipping at 1, riftco.capture on)
start from the same weights and batches and run step by step interleaved, so all three see
the same machine load. Reported per run:

* validation loss at the end (the same fixed held-out batches for all), computed in the
  run's own precision and, for the mixed runs, also from its float32 masters in fp32; the
  difference to fp32's (issue 34's target: within 0.03 nats);
* activation bytes per step: the allocator's high-water mark during a step minus what was
  allocated before it (weights, AdamW state, last gradients and the other trainers' state
  are the baseline), median over the steps after the first ten (warm-up, capture
  recordings). Widened ops (core's float32 fallback for a backend's half dtypes) count
  their float32 temporaries here; numpy temporaries inside a cpu kernel are not tensors
  and are not counted on any run;
* ms per step (median after the first ten; the step alone, no evaluation);
* fp16: the loss-scale trajectory (every change: step, old -> new, skipped or grown).

Backends: native and the OpenCL twin where they declare the half dtypes; when neither
does, the cpu reference backend (the table says which ran).

    python bench/mixed_precision.py [--steps 1000] [--backends native,opencl] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import riftco  # noqa: E402
from common import cpu_model, machine, table, write_json  # noqa: E402
from riftco.nn import GPT, GPTConfig  # noqa: E402
from riftco.train.cli import build_train_parser  # noqa: E402
from riftco.train.data import CharDataset, load_text  # noqa: E402
from riftco.train.loop import DivergenceError, TrainConfig, Trainer  # noqa: E402
from riftco.train.precision import PRECISIONS, precision  # noqa: E402

MB = 1 << 20
SETTLE = 10  # steps left out of the medians: warm-up, the capture's two recordings


def _declares(name: str, prec: str) -> bool:
    entry = riftco.get_registry().entry(name)
    if not (entry.available and entry.devices()):
        return False
    compute = precision(prec).compute
    return compute is None or compute in riftco.device(name).backend.dtypes


def pick_backends(asked: str | None) -> tuple[list[str], str]:
    """The backends to run and a note on why those."""
    if asked:
        return asked.split(","), "asked for with --backends"
    half = [n for n in ("native", "opencl") if all(_declares(n, p) for p in PRECISIONS)]
    if half:
        return half, "native and the OpenCL twin where they declare float16 and bfloat16"
    return ["cpu"], (
        "neither native nor opencl declares float16 and bfloat16 here yet: the cpu reference "
        "backend ran instead"
    )


def make_trainers(backend: str, steps: int, precs: list[str]) -> dict[str, Trainer]:
    a = build_train_parser().parse_args([])  # `make train`'s defaults
    text, source = load_text(None)
    data = CharDataset.from_text(text, a.context, source)
    mcfg = GPTConfig(vocab=data.tokenizer.vocab_size, context=a.context, layers=a.layers,
                     heads=a.heads, width=a.width, attention=a.attention)  # fmt: skip
    out = {}
    for prec in precs:
        cfg = TrainConfig(steps=steps, batch_size=a.batch_size, lr=a.lr, warmup=a.warmup,
                          min_lr_ratio=a.min_lr_ratio, weight_decay=a.weight_decay,
                          grad_clip=a.grad_clip, eval_iters=a.eval_iters, seed=a.seed,
                          precision=prec, loss_scale_interval=a.loss_scale_interval)  # fmt: skip
        model = GPT(mcfg, device=backend, seed=a.seed)
        out[prec] = Trainer(model, data, cfg, capture=a.capture)
    return out


def run_backend(
    backend: str, steps: int, precs: list[str], report: Any = None, every: int = 0
) -> list[dict[str, Any]]:
    """The rows of one backend; ``report(rows)`` also gets the rows every ``every`` steps
    (a long run on a busy machine leaves numbers behind even when it is stopped)."""
    trainers = make_trainers(backend, steps, precs)
    dev = riftco.device(backend).backend
    times: dict[str, list[float]] = {p: [] for p in precs}
    acts: dict[str, list[int]] = {p: [] for p in precs}
    failed: dict[str, str] = {}
    for i in range(steps):
        order = precs[i % len(precs) :] + precs[: i % len(precs)]  # rotate who goes first
        for prec in order:
            if prec in failed:
                continue
            t = trainers[prec]
            dev.synchronize()
            base = dev.memory_stats()["allocated_bytes"]
            dev.reset_peak()
            t0 = time.perf_counter()
            try:
                t.train_step()
                dev.synchronize()
            except DivergenceError as exc:
                failed[prec] = str(exc)[:200]
                continue
            times[prec].append(time.perf_counter() - t0)
            acts[prec].append(dev.memory_stats()["peak_bytes"] - base)
            for line in t._log:
                print(f"  {backend} {prec}: {line}")
            t._log.clear()
        if (i + 1) % 100 == 0:
            print(f"  {backend}: step {i + 1}/{steps}", flush=True)
        if report is not None and every and (i + 1) % every == 0 and i + 1 < steps:
            report(summarize(backend, trainers, precs, times, acts, failed))
    return summarize(backend, trainers, precs, times, acts, failed)


def summarize(
    backend: str,
    trainers: dict[str, Trainer],
    precs: list[str],
    times: dict[str, list[float]],
    acts: dict[str, list[int]],
    failed: dict[str, str],
) -> list[dict[str, Any]]:
    rows = []
    for prec in precs:
        t = trainers[prec]
        row: dict[str, Any] = {"backend": backend, "precision": prec, "steps": t.step}
        if prec in failed:
            row["diverged"] = failed[prec]
            rows.append(row)
            continue
        history = len(t.val_losses)
        row["val_loss"] = t.evaluate()
        if t.precision.compute is not None:  # the float32 masters, evaluated in fp32
            own, t.precision = t.precision, precision("fp32")
            row["val_loss_masters_fp32"] = t.evaluate()
            t.precision = own
        del t.val_losses[history:]  # not part of the run's own history
        settled_t, settled_a = times[prec][SETTLE:] or times[prec], acts[prec][SETTLE:]
        row["ms_per_step"] = 1000 * statistics.median(settled_t)
        row["act_MB"] = statistics.median(settled_a or acts[prec]) / MB
        row["act_MB_max"] = max(acts[prec]) / MB
        row["train_loss_last20"] = statistics.fmean(v for _, v in t.train_losses[-20:])
        if t.scaler is not None:
            row["skipped"] = t.scaler.skipped
            row["final_scale"] = t.scaler.scale
            row["scale_events"] = [list(e) for e in t.scaler.events]
        rows.append(row)
    ref = next((r for r in rows if r["precision"] == "fp32" and "val_loss" in r), None)
    for r in rows:
        if ref is not None and "val_loss" in r:
            r["dval_vs_fp32"] = r["val_loss"] - ref["val_loss"]
            r["act_vs_fp32"] = r["act_MB"] / ref["act_MB"] if ref["act_MB"] else None
            r["ms_vs_fp32"] = r["ms_per_step"] / ref["ms_per_step"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--backends", default=None, help="comma-separated (default: see docstring)")
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--quick", action="store_true", help="30 steps: a smoke run")
    ap.add_argument("--report-every", type=int, default=250, help="interim tables (0: none)")
    args = ap.parse_args()
    steps = 30 if args.quick else args.steps
    backends, why = pick_backends(args.backends)
    precs = args.precisions.split(",")
    print(f"mixed precision, {steps} steps of `make train`'s model on {', '.join(backends)} "
          f"({why}); CPU: {cpu_model()}", flush=True)  # fmt: skip
    name = "mixed_precision_quick" if args.quick else "mixed_precision"
    rows: list[dict[str, Any]] = []
    for b in backends:
        done = list(rows)
        rows += run_backend(b, steps, precs, lambda part, done=done: show(done + part, name, why,
                            steps), args.report_every)  # fmt: skip
    show(rows, name, why, steps)


def show(rows: list[dict[str, Any]], name: str, why: str, steps: int) -> None:
    cols = ["backend", "precision", "steps", "val_loss", "val_loss_masters_fp32",
            "dval_vs_fp32", "act_MB", "act_vs_fp32", "ms_per_step", "ms_vs_fp32", "skipped",
            "final_scale"]  # fmt: skip
    print(table(rows, cols))
    for r in rows:
        if r.get("scale_events") is not None:
            trail = ", ".join(
                f"{s}: {a:g}->{b:g}{' skipped' if k else ''}" for s, a, b, k in r["scale_events"]
            )
            print(f"{r['backend']} fp16 loss scale: {trail or 'unchanged'}")
        if "diverged" in r:
            print(f"{r['backend']} {r['precision']} diverged: {r['diverged']}")
    path = write_json(name, {"steps": steps, "backends_note": why, "rows": rows,
                             "machine": machine()})  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
