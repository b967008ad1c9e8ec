"""Peak bytes a backend holds: a training step with and without activation recompute,
and flash vs materialised attention (forward + backward of the attention alone).

The number is ``backend.memory_stats()["peak_bytes"]`` (bytes in live tensor buffers)
minus what was live before the measured region (weights, optimizer state, inputs): the
*extra* memory the region needs. On the CPU backend numpy temporaries inside a kernel are
not tensors and so are not counted there; ``host_peak`` (tracemalloc, CPU only) adds them.

    python bench/memory.py [--backends cpu,opencl] [--lengths 256,1024,4096] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import riftco  # noqa: E402
from common import machine, table, write_json  # noqa: E402
from riftco.autograd import Variable, attention  # noqa: E402
from riftco.nn import GPT  # noqa: E402
from riftco.optim import AdamW  # noqa: E402
from train_step import available_backends, make_batches, model_config  # noqa: E402

ATTN_SHAPE = {"B": 1, "H": 2, "D": 32}  # small so T=4096 materialised fits anywhere
MB = 1 << 20


def extra_peak(backend: Any, fn: Callable[[], Any], host: bool) -> tuple[int, int | None]:
    """Peak bytes above the live baseline while ``fn`` runs (backend; host via tracemalloc)."""
    gc.collect()
    backend.synchronize()
    base = backend.memory_stats()["allocated_bytes"]
    backend.reset_peak()
    if host:
        tracemalloc.start()
    try:
        keep = fn()
        backend.synchronize()
    finally:
        host_peak = tracemalloc.get_traced_memory()[1] if host else None
        if host:
            tracemalloc.stop()
    del keep
    return backend.memory_stats()["peak_bytes"] - base, host_peak


def _train_step(name: str, config: str, recompute: str) -> Callable[[], float]:
    cfg, batch = model_config(config)
    cfg.recompute = recompute
    dev = riftco.device(name)
    model = GPT(cfg, device=dev, seed=0)
    opt = AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    x, y = make_batches(cfg, batch, 1)[0]
    xt, yt = riftco.tensor(x, device=dev), riftco.tensor(y, device=dev)

    def step() -> float:
        loss = model.loss(xt, yt)
        loss.backward()
        opt.step()
        return float(loss.item())

    return step


def train_step_rows(name: str, config: str) -> list[dict[str, Any]]:
    rows = []
    backend = riftco.device(name).backend
    for ckpt in ("none", "block"):
        step = _train_step(name, config, ckpt)
        step()  # optimizer state and gradients exist from here on: they are baseline
        extra, _ = extra_peak(backend, step, host=False)
        rows.append({"backend": name, "what": f"train step {config}",
                     "variant": f"recompute={ckpt}", "extra_MB": extra / MB})  # fmt: skip
        del step
    base = rows[0]["extra_MB"]
    for r in rows:
        r["vs_first"] = r["extra_MB"] / base if base else None
    return rows


def attention_rows(name: str, lengths: list[int]) -> list[dict[str, Any]]:
    dev = riftco.device(name)
    backend = dev.backend
    rng = np.random.default_rng(0)
    rows = []
    for t in lengths:
        shape = (ATTN_SHAPE["B"], ATTN_SHAPE["H"], t, ATTN_SHAPE["D"])
        qkv = [Variable(riftco.tensor(rng.standard_normal(shape).astype(np.float32), device=dev),
                        requires_grad=True) for _ in range(3)]  # fmt: skip
        seed = riftco.tensor(np.ones(shape, np.float32), device=dev)
        per_mode = {}
        for mode in ("materialized", "flash"):

            def fwd_bwd(mode: str = mode, qkv: list[Variable] = qkv, seed: Any = seed) -> None:
                out = attention(*qkv, causal=True, mode=mode)
                out.backward(seed)
                for v in qkv:
                    v.grad = None  # gradients are the op's result, not kept past the region

            try:
                extra, host = extra_peak(backend, fwd_bwd, host=name == "cpu")
            except Exception as exc:  # e.g. a [T, T] buffer larger than the device allows
                print(f"  {name} attention T={t} {mode}: {type(exc).__name__}: {exc}"[:200])
                continue
            per_mode[mode] = extra
            row = {"backend": name, "what": f"attention T={t}", "variant": mode,
                   "extra_MB": extra / MB}  # fmt: skip
            if host is not None:
                row["host_peak_MB"] = host / MB
            rows.append(row)
        if len(per_mode) == 2 and per_mode["flash"]:
            rows[-1]["materialized/flash"] = per_mode["materialized"] / per_mode["flash"]
        del qkv, seed
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="", help="comma list; default: every available one")
    ap.add_argument("--lengths", default="256,1024,4096")
    ap.add_argument("--config", default="small")
    ap.add_argument("--quick", action="store_true", help="T = 256, 1024 only")
    args = ap.parse_args()
    lengths = [int(t) for t in args.lengths.split(",")]
    if args.quick:
        lengths = [t for t in lengths if t <= 1024]
    rows: list[dict[str, Any]] = []
    for name in [b for b in args.backends.split(",") if b] or available_backends():
        try:
            riftco.device(name)
        except Exception as exc:  # an unavailable backend is reported, not fatal
            print(f"skip {name}: {exc}")
            continue
        rows += train_step_rows(name, args.config)
        rows += attention_rows(name, lengths)
    cols = ["backend", "what", "variant", "extra_MB", "host_peak_MB", "vs_first",
            "materialized/flash"]  # fmt: skip
    print(table(rows, cols))
    path = write_json("memory", {"machine": machine(), "attention_shape": ATTN_SHAPE,
                                 "rows": rows})  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
