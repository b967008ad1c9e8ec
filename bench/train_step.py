"""ms per training step (forward + backward + AdamW) of the GPT, riftco vs references.

Configs (vocab 65, GELU tanh, pre-LN, untied head, float32):
  small  T=64,  B=16, 2 layers, 4 heads, width 128
  large  T=128, B=16, 4 layers, 4 heads, width 256

Contenders, interleaved step by step in one run so ratios are honest on a shared machine:
riftco on every available in-tree backend (cpu, opencl, metal, native, ...) in both
attention modes; PyTorch eager on CPU and tinygrad (TinyJit, CPU and OpenCL) when they are
installed. All of them start from riftco's initial weights. numpy/OpenBLAS/OpenMP and
PyTorch get the same thread count (``--threads``, default: every core), set in the
environment before numpy is imported and recorded in the JSON.

    python bench/train_step.py [--configs small,large] [--backends cpu,opencl]
                               [--steps 20] [--quick] [--refs torch,tinygrad]
"""

from __future__ import annotations

import argparse
import os
import sys


def _threads_from_argv() -> int:
    """--threads must act before numpy loads, so it is read ahead of argparse."""
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            return int(sys.argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return int(os.environ.get("RIFTCO_BENCH_THREADS", os.cpu_count() or 1))


THREADS = _threads_from_argv()
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
for _name in THREAD_ENV:
    os.environ[_name] = str(THREADS)

import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import references as refs  # noqa: E402
import riftco  # noqa: E402
from common import machine, summarize, table, write_json  # noqa: E402
from riftco.nn import GPT, GPTConfig  # noqa: E402
from riftco.optim import AdamW  # noqa: E402

CONFIGS: dict[str, dict[str, int]] = {
    "small": {"context": 64, "batch": 16, "layers": 2, "heads": 4, "width": 128},
    "large": {"context": 128, "batch": 16, "layers": 4, "heads": 4, "width": 256},
}
VOCAB = 65
LR, WEIGHT_DECAY = 3e-4, 0.1
MODES = ("materialized", "flash")


def available_backends() -> list[str]:
    """Every available backend shipped with riftco itself (third-party examples left out)."""
    reg = riftco.get_registry()
    return [e.name for e in reg.entries.values()
            if e.available and e.distribution == "riftco" and e.devices()]  # fmt: skip


def model_config(name: str, mode: str = "materialized") -> tuple[GPTConfig, int]:
    c = CONFIGS[name]
    cfg = GPTConfig(vocab=VOCAB, context=c["context"], layers=c["layers"], heads=c["heads"],
                    width=c["width"], attention=mode)  # fmt: skip
    return cfg, c["batch"]


def make_batches(cfg: GPTConfig, batch: int, n: int = 4) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(1234)
    out = []
    for _ in range(n):
        x = rng.integers(0, cfg.vocab, (batch, cfg.context)).astype(np.int32)
        out.append((x, np.roll(x, -1, axis=1)))
    return out


def riftco_step(
    backend: str, cfg: GPTConfig, batches: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[refs.Step, Any]:
    """One riftco training step as a user writes it; ids are uploaded every step."""
    dev = riftco.device(backend)
    model = GPT(cfg, device=dev, seed=0)
    opt = AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    state = {"i": 0}

    def step() -> float:
        x, y = batches[state["i"] % len(batches)]
        state["i"] += 1
        loss = model.loss(riftco.tensor(x, device=dev), riftco.tensor(y, device=dev))
        loss.backward()
        opt.step()
        return float(loss.item())  # the sync point: a GPU step is done when this returns

    return step, model


def contenders(config: str, backends: list[str], wanted_refs: set[str]) -> tuple[dict, list]:
    """name -> (step fn, info); plus a list of skip lines (reason strings)."""
    out: dict[str, tuple[refs.Step, dict[str, Any]]] = {}
    skipped: list[str] = []
    weights = None
    for backend in backends:
        for mode in MODES:
            cfg, batch = model_config(config, mode)
            batches = make_batches(cfg, batch)
            try:
                step, model = riftco_step(backend, cfg, batches)
            except Exception as exc:  # an unavailable backend is reported, not fatal
                skipped.append(f"riftco {backend}/{mode}: {type(exc).__name__}: {exc}")
                break
            if weights is None:
                weights = model.state_dict()
            out[f"riftco {backend} {mode[:5]}"] = (
                step,
                {"framework": "riftco", "backend": backend, "attention": mode},
            )
    cfg, batch = model_config(config)
    batches = make_batches(cfg, batch)
    if weights is None:
        weights = GPT(cfg, device="cpu", seed=0).state_dict()
    if "torch" in wanted_refs:
        if refs.torch_version() is None:
            skipped.append("torch: not installed (optional; pip install torch)")
        else:
            step = refs.torch_step(weights, cfg, batches, LR, WEIGHT_DECAY, THREADS)
            out["torch eager cpu"] = (step, {"framework": f"torch {refs.torch_version()}",
                                             "backend": "cpu", "attention": "sdpa"})  # fmt: skip
    if "tinygrad" in wanted_refs:
        if refs.tinygrad_version() is None:
            skipped.append("tinygrad: not installed (optional; pip install tinygrad)")
        else:
            for dev in ("CPU", "CL"):
                try:
                    step = refs.tinygrad_step(weights, cfg, batches, LR, WEIGHT_DECAY, dev)
                    step()  # compile errors show here, not in the timed loop
                except Exception as exc:  # a missing compiler or device: skip with the reason
                    hint = (
                        " (tinygrad's CPU device compiles with clang)"
                        if "clang" in str(exc)
                        else ""
                    )
                    skipped.append(f"tinygrad {dev}: {type(exc).__name__}: {str(exc)[:200]}{hint}")
                    continue
                out[f"tinygrad jit {dev.lower()}"] = (
                    step, {"framework": f"tinygrad {refs.tinygrad_version()}",
                           "backend": dev.lower(), "attention": "sdpa"})  # fmt: skip
    return out, skipped


def run_config(config: str, backends: list[str], wanted: set[str], steps: int, warmup: int) -> dict:
    runs, skipped = contenders(config, backends, wanted)
    for line in skipped:
        print(f"  skip {line}")
    first_loss: dict[str, float] = {}
    for name, (step, _) in runs.items():
        first_loss[name] = step()
        for _ in range(warmup - 1):
            step()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for i in range(steps):
        rot = i % len(names)  # rotate who goes first: no contender always runs on a cold cache
        for name in names[rot:] + names[:rot]:
            t0 = time.perf_counter()
            runs[name][0]()
            samples[name].append(time.perf_counter() - t0)
    rows = []
    torch_med = None
    if "torch eager cpu" in samples:
        torch_med = summarize(samples["torch eager cpu"])["median_ms"]
    for name in names:
        s = summarize(samples[name])
        row = {"config": config, "contender": name, **runs[name][1], **s,
               "first_loss": round(first_loss[name], 5)}  # fmt: skip
        row["vs_torch"] = s["median_ms"] / torch_med if torch_med else None
        rows.append(row)
    return {"rows": rows, "skipped": skipped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="small,large")
    ap.add_argument("--backends", default="", help="comma list; default: every available one")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--refs", default="torch,tinygrad", help="optional references to include")
    ap.add_argument("--threads", type=int, default=THREADS, help="BLAS/torch threads")
    ap.add_argument("--quick", action="store_true", help="small config, 5 steps")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.warmup = min(args.steps, 5), 2
        if args.configs == "small,large":
            args.configs = "small"
    backends = [b for b in args.backends.split(",") if b] or available_backends()
    wanted = {r for r in args.refs.split(",") if r}
    print(f"threads {THREADS} ({', '.join(THREAD_ENV)}); backends {backends}; "
          f"{args.steps} timed steps after {args.warmup} warm-up")  # fmt: skip
    host = machine()
    print(f"machine: {host['summary']}")
    results: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for config in args.configs.split(","):
        print(f"config {config}: {CONFIGS[config]}")
        results[config] = run_config(config, backends, wanted, args.steps, args.warmup)
        rows += results[config]["rows"]
    print(table(rows, ["config", "contender", "median_ms", "min_ms", "vs_torch", "first_loss"]))
    env = {k: os.environ.get(k) for k in (*THREAD_ENV, "POCL_MAX_PTHREAD_COUNT")}
    path = write_json("train_step", {
        "machine": host, "threads": THREADS, "env": env, "steps": args.steps,
        "warmup": args.warmup, "configs": {c: CONFIGS[c] for c in results}, "vocab": VOCAB,
        "lr": LR, "weight_decay": WEIGHT_DECAY, "rows": rows,
        "skipped": {c: r["skipped"] for c, r in results.items()},
    })  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
