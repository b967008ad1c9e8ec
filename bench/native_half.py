"""Native float16/bfloat16: conversion throughput (F16C vs the portable bit path vs numpy).

Calls the conversion kernels of ``kernels_half.c`` directly (cffi) on flat arrays, each
direction and path interleaved round-robin in one run so every contender sees the same
machine load. GB/s counts the bytes read plus the bytes written. numpy's ``astype`` (and
ml_dtypes' for bfloat16) is the yardstick.

    python bench/native_half.py [--sizes 1048576,16777216] [--reps 15]

Writes bench/results/native_half.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from common import machine, round_robin, table, write_json  # noqa: E402

from backends.native import build  # noqa: E402


def conversion_cases(mod: Any, n: int) -> dict[str, tuple[Any, int]]:
    """name -> (call, bytes moved) for every direction, path and the numpy yardstick."""
    import ml_dtypes

    ffi, lib = mod.ffi, mod.lib
    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(0)
    f32 = (rng.standard_normal(n) * 100).astype(np.float32)
    f64 = f32.astype(np.float64)
    h16, b16 = f32.astype(np.float16), f32.astype(bf16)
    out16 = np.empty(n, np.uint16)
    out32, out64 = np.empty(n, np.float32), np.empty(n, np.float64)
    p = {
        "f32": ffi.from_buffer("float[]", f32), "f64": ffi.from_buffer("double[]", f64),
        "h16": ffi.from_buffer("uint16_t[]", h16.view(np.uint16)),
        "b16": ffi.from_buffer("uint16_t[]", b16.view(np.uint16)),
        "o16": ffi.from_buffer("uint16_t[]", out16), "o32": ffi.from_buffer("float[]", out32),
        "o64": ffi.from_buffer("double[]", out64),
    }  # fmt: skip
    cases: dict[str, tuple[Any, int]] = {}
    for f16c, path in ((1, "f16c"), (0, "portable")):
        cases[f"f32->f16 {path}"] = (
            lambda c=f16c: lib.half_from_f32(p["f32"], p["o16"], n, 0, c),
            6,
        )
        cases[f"f16->f32 {path}"] = (lambda c=f16c: lib.half_to_f32(p["h16"], p["o32"], n, 0, c), 6)
        cases[f"f64->f16 {path}"] = (
            lambda c=f16c: lib.half_from_f64(p["f64"], p["o16"], n, 0, c),
            10,
        )
    cases["f32->bf16 portable"] = (lambda: lib.half_from_f32(p["f32"], p["o16"], n, 1, 0), 6)
    cases["bf16->f32 portable"] = (lambda: lib.half_to_f32(p["b16"], p["o32"], n, 1, 0), 6)
    cases["f64->bf16 portable"] = (lambda: lib.half_from_f64(p["f64"], p["o16"], n, 1, 0), 10)
    o16h, o16b = out16.view(np.float16), out16.view(bf16)
    cases["f32->f16 numpy"] = (lambda: np.copyto(o16h, f32, casting="unsafe"), 6)
    cases["f16->f32 numpy"] = (lambda: np.copyto(out32, h16, casting="unsafe"), 6)
    cases["f64->f16 numpy"] = (lambda: np.copyto(o16h, f64, casting="unsafe"), 10)
    cases["f32->bf16 ml_dtypes"] = (lambda: np.copyto(o16b, f32, casting="unsafe"), 6)
    cases["bf16->f32 ml_dtypes"] = (lambda: np.copyto(out32, b16, casting="unsafe"), 6)
    return cases  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1048576,16777216", help="elements per conversion")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    mod = build.load()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        cases = conversion_cases(mod, n)
        with np.errstate(all="ignore"):
            times = round_robin({k: c for k, (c, _) in cases.items()}, args.reps)
        for name, (_, per) in cases.items():
            t = times[name]
            rows.append({"conversion": name, "elements": n, "ms": t * 1e3,
                         "GB/s": n * per / t / 1e9})  # fmt: skip
    m = machine()
    payload = {"machine": m, "f16c": int(mod.lib.rift_half_f16c()),
               "threads": int(mod.lib.rift_num_threads()), "conversions": rows}  # fmt: skip
    print(f"# {m.get('summary', '')}  (F16C: {payload['f16c']}, threads: {payload['threads']})")
    print(table(rows, ["conversion", "elements", "ms", "GB/s"]))
    print(write_json("native_half", payload))


if __name__ == "__main__":
    main()
