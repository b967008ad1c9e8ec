"""Native float16/bfloat16: conversion throughput (F16C vs the portable bit path vs numpy),
and the ops the native backend runs in 2-byte storage against core's widened path.

Conversions: the kernels of ``kernels_half.c`` called directly (cffi) on flat arrays.
GB/s counts the bytes read plus the bytes written; numpy's ``astype`` (ml_dtypes' for
bfloat16) is the yardstick.

Ops: the public ``riftco.ops`` call on float16/bfloat16 tensors on the native device, at
the shapes of ``make train``'s model (batch 16 x context 64 = 1,024 rows, width 128, MLP
512, 4 heads: softmax rows of 64) and 8x its rows. "widened" is the same backend with
its ``low_precision_ops`` emptied for the call (core then casts in, runs float32, casts
out), "native" the 2-byte kernel. Every table comes from one run in which the contenders
alternate (each round starting one contender later), so their ratio sees the same machine
load. Medians; on a shared 2-core VM the spread between runs is large (rerun to compare).

    python bench/native_half.py [--sizes 1048576,16777216] [--reps 15] [--no-ops]

Writes bench/results/native_half.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from common import machine, table, write_json  # noqa: E402

from backends.native import build  # noqa: E402


def rotating(fns: dict[str, Any], reps: int) -> dict[str, float]:
    """Median seconds per call of each function, every repetition calling each once in an
    order rotated by one from the last (the first call of a round, after the team slept
    through another contender's numpy call, is not always the same contender's)."""
    names = list(fns)
    for name in names:
        fns[name]()
    samples: dict[str, list[float]] = {k: [] for k in names}
    for r in range(reps):
        for i in range(len(names)):
            name = names[(i + r) % len(names)]
            t0 = time.perf_counter()
            fns[name]()
            samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


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


def op_cases(dtype: Any, rows: int) -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """name -> (riftco op, tensor operands) at the training model's shapes."""
    import riftco
    from riftco import ops as F

    dev = riftco.device("native")
    rng = np.random.default_rng(0)

    def t(*shape: int) -> Any:
        return riftco.tensor((rng.standard_normal(shape) * 0.5).astype(dtype), device=dev)

    x128, x512 = t(rows, 128), t(rows, 512)
    ids = riftco.tensor(rng.integers(0, 65, rows), device=dev)
    stats = tuple(riftco.tensor(rng.random(rows, dtype=np.float32) + 0.5, device=dev)
                  for _ in range(2))  # fmt: skip
    return {
        f"add [{rows}x512]": (F.add, (x512, t(rows, 512))),
        f"mul [{rows}x128]": (F.mul, (x128, t(rows, 128))),
        f"softmax [{rows * 4}x64]": (F.softmax, (t(rows * 4, 64),)),
        f"layer_norm [{rows}x128]": (lambda x, g, b: F.layer_norm(x, g, b, 1e-5),
                                     (x128, t(128), t(128))),
        f"softmax_backward [{rows * 4}x64]": (F.softmax_backward, (t(rows * 4, 64),
                                                                  F.softmax(t(rows * 4, 64)))),
        f"add_layer_norm [{rows}x128]": (lambda x, r, g, b: F.add_layer_norm(x, r, g, b, 1e-5),
                                         (x128, t(rows, 128), t(128), t(128))),
        f"gelu tanh [{rows}x512]": (lambda x: F.gelu(x, "tanh"), (x512,)),
        f"gelu_backward tanh [{rows}x512]": (lambda d, x: F.gelu_backward(d, x, "tanh"),
                                             (t(rows, 512), x512)),
        f"embedding [{rows} ids of 65x128]": (F.embedding, (t(65, 128), riftco.tensor(
            rng.integers(0, 65, rows), device=dev))),
        f"layer_norm_backward [{rows}x128]": (F.layer_norm_backward,
                                              (t(rows, 128), x128, t(128), *stats)),
        f"cross_entropy [{rows}x65]": (F.cross_entropy, (t(rows, 65), ids)),
        f"linear qkv [{rows}x128 @ 128x384]": (F.linear, (x128, t(128, 384), t(384))),
        f"linear mlp-down [{rows}x512 @ 512x128]": (F.linear, (x512, t(512, 128), t(128))),
        f"matmul [{rows}x128 @ 128x512]": (F.matmul, (x128, t(128, 512))),
        f"linear_backward qkv [{rows}x128 @ 128x384]": (F.linear_backward,
                                                        (t(rows, 384), x128, t(128, 384))),
        f"linear_gelu mlp-up [{rows}x128 @ 128x512]": (
            lambda x, w, b: F.linear_gelu(x, w, b, "tanh"), (x128, t(128, 512), t(512))),
    }  # fmt: skip


def op_rows(rows_list: list[int], reps: int) -> list[dict[str, Any]]:
    import ml_dtypes
    import riftco

    be = riftco.device("native").backend
    native_ops = type(be).low_precision_ops
    out = []
    for dtype in (np.float16, ml_dtypes.bfloat16):
        for rows in rows_list:
            for name, (fn, args) in op_cases(dtype, rows).items():

                def widened(fn: Any = fn, args: Any = args) -> Any:
                    be.low_precision_ops = frozenset()  # core widens every op for this call
                    try:
                        return fn(*args)
                    finally:
                        del be.low_precision_ops

                def native(fn: Any = fn, args: Any = args) -> Any:
                    return fn(*args)

                times = rotating({"widened": widened, "native": native}, reps)
                w, n = times["widened"], times["native"]
                out.append({"op": name, "dtype": np.dtype(dtype).name, "widened ms": w * 1e3,
                            "native ms": n * 1e3, "widened/native": w / n})  # fmt: skip
    print(f"# native low_precision_ops: {', '.join(sorted(native_ops))}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1048576,16777216", help="elements per conversion")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rows", default="1024,8192", help="rows of the op cases")
    ap.add_argument("--ops", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    mod = build.load()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        cases = conversion_cases(mod, n)
        with np.errstate(all="ignore"):
            times = rotating({k: c for k, (c, _) in cases.items()}, args.reps)
        for name, (_, per) in cases.items():
            t = times[name]
            rows.append({"conversion": name, "elements": n, "ms": t * 1e3,
                         "GB/s": n * per / t / 1e9})  # fmt: skip
    m = machine()
    payload = {"machine": m, "f16c": int(mod.lib.rift_half_f16c()),
               "threads": int(mod.lib.rift_num_threads()), "conversions": rows}  # fmt: skip
    print(f"# {m.get('summary', '')}  (F16C: {payload['f16c']}, threads: {payload['threads']})")
    print(table(rows, ["conversion", "elements", "ms", "GB/s"]))
    if args.ops:
        payload["ops"] = op_rows([int(r) for r in args.rows.split(",")], args.reps)
        print(table(payload["ops"], ["op", "dtype", "widened ms", "native ms", "widened/native"]))
    print(write_json("native_half", payload))


if __name__ == "__main__":
    main()
