"""What the part-2 protocol ops would save on the native backend, per GPT training step.

Each linear layer of the GPT (qkv, proj, fc, fc2 per block; the head has no bias) is
timed two ways on its real shape, interleaved:

* forward: ``matmul`` + bias ``add`` (today) vs ``linear`` (bias added per thread while
  the product is in cache);
* backward: ``matmul`` (dX) + ``matmul`` (dW) + ``sum`` (db) (today) vs
  ``linear_backward`` (one parallel region);
* attention: q, k, v split out of the fused projection, heads merged back with a copy,
  dq, dk, dv merged and concatenated (today) vs ``attention_qkv`` and
  ``attention_qkv_backward`` reading and writing the projection layouts in place.

The per-step saving is the sum over the step's layers of (today - fused), medians.

    python bench/native_fusion.py [--configs small,large] [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", str(os.cpu_count() or 1))
os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import riftco  # noqa: E402
from common import machine, round_robin, table, write_json  # noqa: E402
from riftco import ops  # noqa: E402
from train_step import CONFIGS, VOCAB  # noqa: E402


def median_us(fns: dict[str, Any], repeat: int) -> dict[str, float]:
    """Median µs per call of each function, calls interleaved round-robin."""
    return {k: sec * 1e6 for k, sec in round_robin(fns, repeat).items()}


def linear_rows(config: str, repeat: int) -> list[dict[str, Any]]:
    c = CONFIGS[config]
    m, width, layers = c["batch"] * c["context"], c["width"], c["layers"]
    be = riftco.device("native").backend
    rng = np.random.default_rng(0)

    def t(*shape: int) -> riftco.Tensor:
        return riftco.tensor(rng.standard_normal(shape).astype(np.float32), device="native")

    shapes = {"qkv": (width, 3 * width), "proj": (width, width), "fc": (width, 4 * width),
              "fc2": (4 * width, width)}  # fmt: skip
    rows = []
    for name, (k, n) in shapes.items():
        x, w, b, dy = t(m, k), t(k, n), t(n), t(m, n)
        row_b = be.broadcast_row(b, (m, n))
        fwd = median_us({
            "today": lambda x=x, w=w, row_b=row_b: ops.add(ops.matmul(x, w), row_b),
            "fused": lambda x=x, w=w, b=b: be.linear(x, w, b),
        }, repeat)  # fmt: skip
        bwd = median_us({
            "today": lambda x=x, w=w, dy=dy: (ops.matmul(dy, w, transpose_b=True),
                                              ops.matmul(x, dy, transpose_a=True),
                                              ops.sum(dy, 0)),
            "fused": lambda x=x, w=w, dy=dy: be.linear_backward(dy, x, w),
        }, repeat)  # fmt: skip
        for what, r in (("forward", fwd), ("backward", bwd)):
            saved = (r["today"] - r["fused"]) * layers / 1e3
            rows.append({"config": config, "layer": name, "shape": f"{m}x{k}x{n}",
                         "pass": what, "per_step": layers, "today_us": r["today"],
                         "fused_us": r["fused"], "saved_ms_per_step": saved})  # fmt: skip
    return rows


def layout_rows(config: str, repeat: int) -> list[dict[str, Any]]:
    """Attention today (q, k, v split out of the fused projection, heads as views, output
    heads merged by a copy; backward: dq, dk, dv heads merged and concatenated) vs
    ``attention_qkv`` / ``attention_qkv_backward`` reading and writing in place."""
    c = CONFIGS[config]
    bsz, tlen, width, layers, heads = c["batch"], c["context"], c["width"], c["layers"], c["heads"]
    d = width // heads
    be = riftco.device("native").backend
    rng = np.random.default_rng(1)

    def t(*shape: int) -> riftco.Tensor:
        return riftco.tensor(rng.standard_normal(shape).astype(np.float32), device="native")

    qkv, dout = t(bsz, tlen, 3 * width), t(bsz, tlen, width)
    scale = 1.0 / d**0.5

    def heads_of(x: riftco.Tensor) -> riftco.Tensor:  # [B, T, C] -> [B, H, T, D] view
        return x.reshape(bsz, tlen, heads, d).permute(0, 2, 1, 3)

    def today_fwd(flash: bool) -> tuple:
        q, k, v = (heads_of(p) for p in ops.split_last_axis(qkv, [width] * 3))
        fn = be.flash_attention if flash else be.attention
        out, stat = fn(q, k, v, scale, True)
        return be.copy_strided(out.permute(0, 2, 1, 3)), stat, (q, k, v, out)

    def today_bwd(flash: bool, saved: tuple) -> Any:
        stat, (q, k, v, out) = saved[1], saved[2]
        do = heads_of(dout)
        if flash:
            grads = be.flash_attention_backward(do, q, k, v, out, stat, scale, True)
        else:
            grads = be.attention_backward(do, q, k, v, stat, scale)
        merged = [be.copy_strided(g.permute(0, 2, 1, 3)).reshape(bsz, tlen, width) for g in grads]
        return ops.concatenate_last_axis(merged)

    rows = []
    for flash in (False, True):
        saved = today_fwd(flash)
        out_f, stat_f = be.attention_qkv(qkv, heads, scale, True, flash)
        r = median_us({
            "fwd today": lambda flash=flash: today_fwd(flash),
            "fwd fused": lambda flash=flash: be.attention_qkv(qkv, heads, scale, True, flash),
            "bwd today": lambda flash=flash, saved=saved: today_bwd(flash, saved),
            "bwd fused": lambda flash=flash, o=out_f, s=stat_f: be.attention_qkv_backward(
                dout, qkv, o, s, heads, scale, True, flash),
        }, repeat)  # fmt: skip
        for what in ("fwd", "bwd"):
            today, fused = r[f"{what} today"], r[f"{what} fused"]
            rows.append({"config": config, "layer": "attention " + ("flash" if flash else "mat."),
                         "shape": f"B{bsz} T{tlen} C{width}", "pass": what, "per_step": layers,
                         "today_us": today, "fused_us": fused,
                         "saved_ms_per_step": (today - fused) * layers / 1e3})  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="small,large")
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    host = machine()
    print(f"machine: {host['summary']}; vocab {VOCAB}")
    rows: list[dict[str, Any]] = []
    for config in args.configs.split(","):
        rows += linear_rows(config, args.repeat)
        rows += layout_rows(config, args.repeat)
    print(table(rows, ["config", "layer", "shape", "pass", "today_us", "fused_us",
                       "saved_ms_per_step"]))  # fmt: skip
    for config in args.configs.split(","):
        mine = [r for r in rows if r["config"] == config]
        lin = sum(r["saved_ms_per_step"] for r in mine if not r["layer"].startswith("attention"))
        att = {m: sum(r["saved_ms_per_step"] for r in mine if r["layer"] == f"attention {m}")
               for m in ("mat.", "flash")}  # fmt: skip
        print(
            f"{config}: fused linear saves {lin:.2f} ms/step; attention from the fused "
            f"projection {att['mat.']:.2f} (materialised) / {att['flash']:.2f} (flash)"
        )
    path = write_json("native_fusion", {"machine": host, "repeat": args.repeat, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
