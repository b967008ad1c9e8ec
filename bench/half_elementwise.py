"""Elementwise ops on float16 / bfloat16: native half storage vs widening, beside float32.

Per op and dtype, median ms per call (synchronised, interleaved blocks) of
  - ``native``: the elementwise kernel's half program (load, compute in float32, store
    rounded once: one launch, 2-byte traffic);
  - ``widened``: what core does for an op a backend does not list in
    ``low_precision_ops``: cast each operand to float32, the float32 kernel, cast back
    (three or four launches, 4-byte intermediates);
  - ``float32``: the float32 kernel on float32 tensors (the same launch as before half
    storage existed: its program expands to the same accesses).

    python bench/half_elementwise.py [--n 4194304] [--reps 20] [--backend opencl]

Writes bench/results/half_elementwise.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("RIFTCO_METAL_STANDIN", "1")
import numpy as np  # noqa: E402
import riftco  # noqa: E402
from riftco.kernel_host.half_storage import HALF_NAMES  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels import _timeit  # noqa: E402

F32 = np.dtype(np.float32)


def bench(backend: str, n: int, reps: int, blocks: int) -> list[dict[str, Any]]:
    be = riftco.device(backend).backend
    rng = np.random.default_rng(0)
    rows = []
    for op in ("add", "mul", "exp"):
        for dtype in HALF_NAMES:
            a = be.from_numpy(rng.standard_normal(n).astype(dtype))
            b = be.from_numpy(rng.standard_normal(n).astype(dtype))
            a32, b32 = (
                be.from_numpy(rng.standard_normal(n).astype(F32)),
                be.from_numpy(rng.standard_normal(n).astype(F32)),
            )

            def run(x: Any, y: Any, op: str = op) -> Any:
                return be.unary(op, x) if op == "exp" else be.binary(op, x, y)

            def widened(op: str = op, a: Any = a, b: Any = b, dtype: Any = dtype) -> Any:
                x, y = be.cast(a, F32), be.cast(b, F32)
                return be.cast(run(x, y, op), dtype)

            variants = {
                "native": lambda a=a, b=b: run(a, b),
                "widened": widened,
                "float32": lambda a32=a32, b32=b32: run(a32, b32),
            }
            times: dict[str, list[float]] = {k: [] for k in variants}
            for _ in range(blocks):
                for name, fn in variants.items():
                    times[name].append(_timeit(be, fn, reps) * 1e3)
            row = {"backend": backend, "op": op, "dtype": dtype.name, "n": n}
            row |= {f"{k}_ms": round(statistics.median(v), 3) for k, v in times.items()}
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=5)
    args = ap.parse_args()
    rows = bench(args.backend, args.n, args.reps, args.blocks)
    out = Path(__file__).resolve().parent / "results" / "half_elementwise.json"
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print(json.dumps(rows))
    print(f"{'op':6} {'dtype':9} {'native ms':>10} {'widened ms':>11} {'float32 ms':>11}")
    for r in rows:
        print(f"{r['op']:6} {r['dtype']:9} {r['native_ms']:10.3f} {r['widened_ms']:11.3f} "
              f"{r['float32_ms']:11.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
