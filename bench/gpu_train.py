"""ms per GPT training step on an NVIDIA GPU: riftco ``cuda`` against PyTorch CUDA eager.

The configs, model, weights and data are bench/train_step.py's (every contender starts
from riftco's initial weights; the first loss of each is recorded so a mismatch shows).
riftco runs both attention modes; PyTorch runs eager fp32 with TF32 off, SDPA attention.
A step ends when the loss is on the host (``loss.item()``), so both sides include their
device work. Target (issue 15): riftco faster than PyTorch CUDA eager at ``large``.

    python bench/gpu_train.py [--device cuda:0] [--configs small,large] [--steps 30]
                              [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import references as refs  # noqa: E402
import train_step as ts  # noqa: E402


def contenders(config: str, device: str) -> tuple[dict[str, Any], list[str]]:
    runs: dict[str, Any] = {}
    skipped: list[str] = []
    weights = None
    for mode in ts.MODES:
        cfg, batch = ts.model_config(config, mode)
        try:
            step, model = ts.riftco_step(device, cfg, ts.make_batches(cfg, batch))
        except Exception as exc:  # reported, not fatal: the reference still runs
            skipped.append(f"riftco {device}/{mode}: {type(exc).__name__}: {exc}"[:300])
            continue
        weights = weights or model.state_dict()
        runs[f"riftco {device} {mode[:5]}"] = step
    cfg, batch = ts.model_config(config)
    if weights is None:
        weights = ts.GPT(cfg, device="cpu", seed=0).state_dict()
    if refs.torch_version() is None:
        skipped.append("torch: not installed")
        return runs, skipped
    import torch

    if not torch.cuda.is_available():
        skipped.append("torch: CUDA is not available to PyTorch")
        return runs, skipped
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    batches = ts.make_batches(cfg, batch)
    try:
        runs["torch eager cuda"] = refs.torch_step(
            weights, cfg, batches, ts.LR, ts.WEIGHT_DECAY, ts.THREADS, device="cuda"
        )
    except TypeError as exc:  # bench/references.py without the device argument
        skipped.append(f"torch cuda: {exc}")
    return runs, skipped


def run_config(config: str, device: str, steps: int, warmup: int) -> dict[str, Any]:
    runs, skipped = contenders(config, device)
    for line in skipped:
        print(f"  skip {line}")
    first = {name: step() for name, step in runs.items()}
    for step in runs.values():
        for _ in range(warmup - 1):
            step()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for i in range(steps):
        rot = i % max(1, len(names))
        for name in names[rot:] + names[:rot]:
            t0 = time.perf_counter()
            runs[name]()
            samples[name].append(time.perf_counter() - t0)
    torch_ms = None
    if samples.get("torch eager cuda"):
        torch_ms = statistics.median(samples["torch eager cuda"]) * 1e3
    rows = []
    for name in names:
        med = statistics.median(samples[name]) * 1e3
        rows.append({"config": config, "contender": name, "median_ms": med,
                     "min_ms": min(samples[name]) * 1e3, "first_loss": round(first[name], 5),
                     "vs_torch_cuda": med / torch_ms if torch_ms else None})  # fmt: skip
        ratio = f"{med / torch_ms:6.2f}x torch" if torch_ms else ""
        print(f"  {name:24s} {med:9.2f} ms  (min {min(samples[name]) * 1e3:.2f})  "
              f"first loss {first[name]:.5f}  {ratio}")  # fmt: skip
    return {"rows": rows, "skipped": skipped}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--configs", default="small,large")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    out: dict[str, Any] = {"device": args.device, "steps": args.steps, "warmup": args.warmup,
                           "configs": {}}  # fmt: skip
    for config in args.configs.split(","):
        print(f"config {config}: {ts.CONFIGS[config]}")
        result = run_config(config, args.device, args.steps, args.warmup)
        out["configs"][config] = {"shape": ts.CONFIGS[config], **result}
    large = out["configs"].get("large", {}).get("rows", [])
    best = min((r for r in large if r["contender"].startswith("riftco")),
               key=lambda r: r["median_ms"], default=None)  # fmt: skip
    if best and best["vs_torch_cuda"] is not None:
        out["large_target_met"] = best["vs_torch_cuda"] < 1.0
        print(f"large: best riftco {best['contender']} at {best['vs_torch_cuda']:.2f}x torch "
              f"(target < 1): {'met' if out['large_target_met'] else 'not met'}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
