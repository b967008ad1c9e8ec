"""Per-op throughput of the kernel backends against the numpy CPU backend.

GB/s for memory-bound ops (bytes read + written once each), GFLOP/s for matmul and
attention. Each measurement queues ``reps`` launches and synchronises once, so it
includes launch overhead but not a host round trip per op: what a training step sees.

    python bench/kernels.py [--backends cpu,opencl] [--quick] [--json out.json]

Not a test: numbers depend on the machine. The ``memory`` slot (flash vs materialised
attention peak bytes) is filled once both attention kernels are native.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import riftco.ops as ops
from riftco.device import device


def _timeit(backend: Any, fn: Callable[[], Any], reps: int) -> float:
    fn()
    backend.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    backend.synchronize()
    return (time.perf_counter() - t0) / reps


def _cases(quick: bool) -> list[tuple[str, str, Callable[[Any, np.random.Generator], Any]]]:
    """(op, size label, setup(backend, rng) -> (fn, amount, unit))."""
    sizes = [1 << 18, 1 << 22] if not quick else [1 << 18]
    out = []
    for n in sizes:

        def ew(b, rng, n=n, op="add"):
            x = b.from_numpy(rng.standard_normal(n).astype(np.float32))
            y = b.from_numpy(rng.standard_normal(n).astype(np.float32))
            return (lambda: ops.add(x, y)), 12 * n, "GB/s"

        def un(b, rng, n=n):
            x = b.from_numpy(rng.standard_normal(n).astype(np.float32))
            return (lambda: ops.exp(x)), 8 * n, "GB/s"

        def red(b, rng, n=n):
            x = b.from_numpy(rng.standard_normal((n // 1024, 1024)).astype(np.float32))
            return (lambda: ops.sum(x, 1)), 4 * n, "GB/s"

        def col(b, rng, n=n):
            x = b.from_numpy(rng.standard_normal((n // 256, 256)).astype(np.float32))
            return (lambda: ops.sum(x, 0)), 4 * n, "GB/s"

        def tr(b, rng, n=n):
            x = b.from_numpy(rng.standard_normal((n // 1024, 1024)).astype(np.float32))
            return (lambda: x.T.contiguous()), 8 * n, "GB/s"

        def sm(b, rng, n=n):
            x = b.from_numpy(rng.standard_normal((n // 512, 512)).astype(np.float32))
            return (lambda: ops.softmax(x)), 8 * n, "GB/s"

        label = f"{n}"
        out += [("add", label, ew), ("exp", label, un), ("sum_rows", label, red),
                ("sum_cols", label, col), ("transpose_copy", label, tr),
                ("softmax", label, sm)]  # fmt: skip
    for m in [128, 256, 512] + ([] if quick else [1024]):

        def mm(b, rng, m=m):
            x = b.from_numpy(rng.standard_normal((m, m)).astype(np.float32))
            w = b.from_numpy(rng.standard_normal((m, m)).astype(np.float32))
            return (lambda: ops.matmul(x, w)), 2 * m**3, "GFLOP/s"

        def mmt(b, rng, m=m):
            x = b.from_numpy(rng.standard_normal((m, m)).astype(np.float32))
            w = b.from_numpy(rng.standard_normal((m, m)).astype(np.float32))
            return (lambda: ops.matmul(x, w, True, True)), 2 * m**3, "GFLOP/s"

        out += [("matmul", f"{m}^3", mm), ("matmul_TT", f"{m}^3", mmt)]
    for t in [64, 256]:
        shape = (4, 4, t, 32)

        def att(b, rng, mode, shape=shape):
            q, k, v = (b.from_numpy(rng.standard_normal(shape).astype(np.float32)) for _ in "qkv")
            fn = ops.flash_attention if mode == "flash" else ops.attention
            flops = 4 * shape[0] * shape[1] * shape[2] ** 2 * shape[3]
            return (lambda: fn(q, k, v, 0.125, True)), flops, "GFLOP/s"

        label = "x".join(map(str, shape))
        out += [("attention", label, lambda b, r, a=att: a(b, r, "materialized")),
                ("flash_attention", label, lambda b, r, a=att: a(b, r, "flash"))]  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="cpu,opencl")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    rows = []
    for spec in args.backends.split(","):
        try:
            backend = device(spec).backend
        except Exception as exc:  # an unavailable backend is reported, not fatal
            print(f"skip {spec}: {exc}")
            continue
        for op, size, setup in _cases(args.quick):
            rng = np.random.default_rng(0)
            try:
                fn, amount, unit = setup(backend, rng)
                sec = _timeit(backend, fn, args.reps)
            except Exception as exc:  # one broken kernel must not hide the other numbers
                print(f"{spec:10s} {op:16s} {size:>12s} error: {type(exc).__name__}: {exc}"[:160])
                continue
            rate = amount / sec / 1e9
            rows.append({"backend": spec, "op": op, "size": size, "ms": sec * 1e3,
                         "rate": rate, "unit": unit})  # fmt: skip
            print(f"{spec:10s} {op:16s} {size:>12s} {sec * 1e3:9.3f} ms {rate:9.2f} {unit}")
    report = {"results": rows, "memory": None}  # memory: flash vs materialised peak bytes
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
