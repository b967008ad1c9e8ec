"""ms per training step (forward + backward + AdamW) of the GPT, riftco vs references.

Configs (vocab 65, GELU tanh, pre-LN, untied head, float32):
  small  T=64,  B=16, 2 layers, 4 heads, width 128
  large  T=128, B=16, 4 layers, 4 heads, width 256

Contenders, interleaved step by step in one run so ratios are honest on a shared machine:
riftco on every available in-tree backend (cpu, opencl, metal, native, ...) in both
attention modes, each as written ("eager") and through ``riftco.capture`` ("capt": what
``riftco train`` runs by default; ``--capture off|on|both``); PyTorch eager on CPU and
tinygrad (TinyJit, CPU and OpenCL) when they are installed. All of them start from
riftco's initial weights. numpy/OpenBLAS/OpenMP and PyTorch get the same thread count
(``--threads``, default: every core), set in the environment before numpy is imported and
recorded in the JSON.

Each contender runs in its own process (``isolated.py`` says why: a shared libgomp made
PyTorch 1.5x slower next to riftco's native backend); ``--in-process`` runs them all in
this one, as before, for comparison.

    python bench/train_step.py [--configs small,large] [--backends cpu,opencl:1]
                               [--steps 20] [--quick] [--refs torch,tinygrad] [--in-process]
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

import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import isolated  # noqa: E402
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


def riftco_update(
    backend: str, cfg: GPTConfig
) -> tuple[riftco.Device, Callable[[riftco.Tensor, riftco.Tensor], riftco.Tensor], GPT]:
    """``(device, update, model)``: ``update(x, y)`` is one forward, backward and AdamW
    step of a fresh model (riftco's initial weights), returning the loss tensor; what a
    benchmark runs as written or through ``riftco.capture``."""
    dev = riftco.device(backend)
    model = GPT(cfg, device=dev, seed=0)
    opt = AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)

    def update(x: riftco.Tensor, y: riftco.Tensor) -> riftco.Tensor:
        loss = model.loss(x, y)
        loss.backward()
        opt.step()
        return loss

    return dev, update, model


def riftco_step(
    backend: str,
    cfg: GPTConfig,
    batches: list[tuple[np.ndarray, np.ndarray]],
    captured: bool = False,
) -> tuple[refs.Step, Any]:
    """One riftco training step as a user writes it; ids are uploaded every step. With
    ``captured`` the same function goes through ``riftco.capture`` (recorded on its first
    calls, replayed after: the warm-up steps cover the recordings)."""
    dev, update, model = riftco_update(backend, cfg)
    state = {"i": 0}
    run = riftco.capture(update) if captured else update

    def step() -> float:
        x, y = batches[state["i"] % len(batches)]
        state["i"] += 1
        loss = run(riftco.tensor(x, device=dev), riftco.tensor(y, device=dev))
        return float(loss.item())  # the sync point: a GPU step is done when this returns

    return step, model


def specs(
    config: str, backends: list[str], wanted_refs: set[str], capture: str = "both"
) -> tuple[list, list]:
    """``[(name, spec, info)]`` of every contender to run, plus skip lines (reasons)."""
    out: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    skipped: list[str] = []
    ways = {"off": (False,), "on": (True,), "both": (False, True)}[capture]
    for backend in backends:
        for mode in MODES:
            for captured in ways:
                spec = {"kind": "riftco", "config": config, "backend": backend, "mode": mode,
                        "captured": captured}  # fmt: skip
                info = {"framework": "riftco", "backend": backend, "attention": mode,
                        "captured": captured}  # fmt: skip
                how = "capt" if captured else "eager"
                out.append((f"riftco {backend} {mode[:5]} {how}", spec, info))
    if "torch" in wanted_refs:
        if refs.torch_version() is None:
            skipped.append("torch: not installed (optional; pip install torch)")
        else:
            info = {"framework": f"torch {refs.torch_version()}", "backend": "cpu",
                    "attention": "sdpa"}  # fmt: skip
            out.append(("torch eager cpu", {"kind": "torch", "config": config}, info))
    if "tinygrad" in wanted_refs:
        if refs.tinygrad_version() is None:
            skipped.append("tinygrad: not installed (optional; pip install tinygrad)")
        else:
            for dev in ("CPU", "CL"):
                info = {"framework": f"tinygrad {refs.tinygrad_version()}",
                        "backend": dev.lower(), "attention": "sdpa"}  # fmt: skip
                spec = {"kind": "tinygrad", "config": config, "device": dev}
                out.append((f"tinygrad jit {dev.lower()}", spec, info))
    return out, skipped


def build(spec: dict[str, Any]) -> refs.Step:
    """The step function of one contender; every one starts from riftco's initial weights
    (``GPT(..., seed=0)`` gives the same numbers on every backend)."""
    cfg, batch = model_config(spec["config"], spec.get("mode", "materialized"))
    batches = make_batches(cfg, batch)
    if spec["kind"] == "riftco":
        return riftco_step(spec["backend"], cfg, batches, spec.get("captured", False))[0]
    weights = GPT(cfg, device="cpu", seed=0).state_dict()
    if spec["kind"] == "torch":
        return refs.torch_step(weights, cfg, batches, LR, WEIGHT_DECAY, THREADS)
    try:
        return refs.tinygrad_step(weights, cfg, batches, LR, WEIGHT_DECAY, spec["device"])
    except Exception as exc:
        if "clang" in str(exc):
            raise RuntimeError(f"{exc} (tinygrad's CPU device compiles with clang)") from exc
        raise


class _InProcess:
    """The :class:`isolated.Worker` interface around a step built in this process."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self._spec = spec

    def ready(self) -> float:
        self._step = build(self._spec)
        return self._step()

    def step(self) -> float:
        t0 = time.perf_counter()
        self._step()
        return time.perf_counter() - t0

    def close(self) -> None:
        self._step = None


def run_config(
    config: str,
    backends: list[str],
    wanted: set[str],
    steps: int,
    warmup: int,
    isolate: bool,
    gap: float,
    block: int,
    settle: int,
    capture: str = "both",
) -> dict:
    todo, skipped = specs(config, backends, wanted, capture)
    runs: dict[str, Any] = {}
    info: dict[str, dict[str, Any]] = {}
    first_loss: dict[str, float] = {}
    failed_backends: set[str] = set()
    for name, spec, meta in todo:
        if spec.get("backend") in failed_backends:
            continue
        worker = isolated.Worker(spec, THREADS) if isolate else _InProcess(spec)
        try:
            first_loss[name] = worker.ready()
        except Exception as exc:  # an unavailable backend or reference: reported, not fatal
            skipped.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
            if spec["kind"] == "riftco":
                failed_backends.add(spec["backend"])
            continue
        # a captured step records on its 2nd and 3rd calls (riftco.capture's warm-up and
        # verification) and replays from its 4th: time only replays
        for _ in range(max(warmup, 3 if spec.get("captured") else 0) - 1):
            worker.step()
        runs[name], info[name] = worker, meta
    for line in skipped:
        print(f"  skip {line}")
    samples: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    rounds = -(-steps // block)
    try:
        for i in range(rounds):
            rot = i % len(names)  # rotate who goes first: no contender always runs on a cold cache
            for name in names[rot:] + names[:rot]:
                time.sleep(gap)  # the last contender's spinning BLAS/OpenMP threads go idle
                for _ in range(settle):  # untimed: wakes this contender's threads and caches
                    runs[name].step()
                for _ in range(min(block, steps - i * block)):
                    samples[name].append(runs[name].step())
    finally:
        for worker in runs.values():
            worker.close()
    rows = []
    torch_med = None
    if "torch eager cpu" in samples:
        torch_med = summarize(samples["torch eager cpu"])["median_ms"]
    for name in names:
        s = summarize(samples[name])
        row = {"config": config, "contender": name, **info[name], **s,
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
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="all contenders in this process (shared OpenMP/BLAS runtimes)",
    )
    ap.add_argument("--block", type=int, default=5,
                    help="timed steps per turn: contenders take turns of back-to-back steps, "
                    "the steady state a training loop sees")  # fmt: skip
    ap.add_argument("--settle", type=int, default=1, help="untimed steps opening each turn")
    ap.add_argument("--gap", type=float, default=0.25,
                    help="seconds between turns: OpenBLAS threads spin ~0.1 s, libgomp's a "
                    "few ms; a gap keeps one contender's spinning out of the next one's "
                    "turn")  # fmt: skip
    ap.add_argument(
        "--capture",
        choices=("off", "on", "both"),
        default="both",
        help="riftco contenders as written, through riftco.capture, or both",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one contender (isolated.py)
    args = ap.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        isolated.serve(lambda: build(spec))
        return
    if args.quick:
        args.steps, args.warmup = min(args.steps, 5), 2
        if args.configs == "small,large":
            args.configs = "small"
    backends = [b for b in args.backends.split(",") if b] or available_backends()
    wanted = {r for r in args.refs.split(",") if r}
    print(f"threads {THREADS} ({', '.join(THREAD_ENV)}); backends {backends}; "
          f"{args.steps} timed steps after {args.warmup} warm-up, in turns of "
          f"{args.settle} + {args.block}; "
          f"{'one process' if args.in_process else 'one process per contender'}")  # fmt: skip
    host = machine()
    print(f"machine: {host['summary']}")
    results: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for config in args.configs.split(","):
        print(f"config {config}: {CONFIGS[config]}")
        isolate = not args.in_process
        results[config] = run_config(config, backends, wanted, args.steps, args.warmup,
                                     isolate, args.gap, args.block, args.settle,
                                     args.capture)  # fmt: skip
        rows += results[config]["rows"]
    print(table(rows, ["config", "contender", "median_ms", "min_ms", "vs_torch", "first_loss"]))
    env = {k: os.environ.get(k) for k in (*THREAD_ENV, "POCL_MAX_PTHREAD_COUNT")}
    path = write_json("train_step", {
        "machine": host, "threads": THREADS, "isolated": not args.in_process, "env": env,
        "steps": args.steps, "warmup": args.warmup, "vocab": VOCAB,
        "configs": {c: CONFIGS[c] for c in results}, "gap_s": args.gap, "block": args.block,
        "settle": args.settle, "lr": LR,
        "weight_decay": WEIGHT_DECAY, "rows": rows,
        "skipped": {c: r["skipped"] for c, r in results.items()},
    })  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
