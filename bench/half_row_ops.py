"""Row ops on float16 / bfloat16 in a kernel backend: half storage vs widening, beside float32.

LayerNorm, add_layer_norm and cross-entropy, forward and backward, at ``make train``'s
shapes (1,024 rows of width 128; 65 classes) and 8x the rows. Per op and dtype, the median
ms per call (synchronised, the contenders called round robin so they see the same load):
  - ``native``: the family's half program (``layer_norm.cl`` / ``cross_entropy.cl`` with
    ``TS`` storage: load, compute in float32, store rounded once);
  - ``widened``: the same call with the ops removed from ``low_precision_ops``, so core
    casts the half operands to float32, runs the float32 kernels and casts back;
  - ``float32``: the float32 kernels on float32 tensors.

    python bench/half_row_ops.py [--backend opencl] [--reps 30]

Writes bench/results/half_row_ops.json and prints a table. On a CPU OpenCL (PoCL) the
float16 stores go through software vstore_half; a GPU converts in hardware.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import riftco  # noqa: E402
import riftco.ops as F  # noqa: E402
from common import machine, round_robin, table, write_json  # noqa: E402
from riftco.dtypes import LOW_PRECISION  # noqa: E402

F32 = np.dtype(np.float32)
ROW_OPS = frozenset(
    {"layer_norm", "layer_norm_backward", "add_layer_norm", "add_layer_norm_backward",
     "cross_entropy", "cross_entropy_backward"}
)  # fmt: skip


def _cases(dev: Any, dtype: np.dtype, rows: int) -> dict[str, Callable[[], Any]]:
    rng = np.random.default_rng(0)
    width, vocab = 128, 65

    def t(*shape: int, dt: np.dtype = dtype) -> Any:
        return riftco.tensor(rng.standard_normal(shape).astype(dt), device=dev)

    x, r, dy, ds = t(rows, width), t(rows, width), t(rows, width), t(rows, width)
    g, b = t(width), t(width)
    _, mean, rstd = F.layer_norm(x, g, b, 1e-5)
    s = F.add(x, r)
    logits, dloss = t(rows, vocab), t(rows, dt=F32)
    targets = riftco.tensor(rng.integers(0, vocab, rows).astype(np.int32), device=dev)
    _, lse = F.cross_entropy(logits, targets)
    return {
        "layer_norm": lambda: F.layer_norm(x, g, b, 1e-5),
        "layer_norm_backward": lambda: F.layer_norm_backward(dy, x, g, mean, rstd),
        "add_layer_norm": lambda: F.add_layer_norm(x, r, g, b, 1e-5),
        "add_layer_norm_backward": lambda: F.add_layer_norm_backward(dy, ds, s, g, mean, rstd),
        "cross_entropy": lambda: F.cross_entropy(logits, targets),
        "cross_entropy_backward": lambda: F.cross_entropy_backward(dloss, logits, targets, lse),
    }


def bench(backend: str, reps: int) -> list[dict[str, Any]]:
    dev = riftco.device(backend)
    be = dev.backend
    listed = frozenset(be.low_precision_ops)
    halves = sorted((d for d in LOW_PRECISION if d in be.dtypes), key=str)
    out = []
    for rows in (1024, 8192):
        wide32 = _cases(dev, F32, rows)
        for dtype in halves:
            cases = _cases(dev, dtype, rows)
            for op, fn in cases.items():

                def synced(f: Callable[[], Any] = fn) -> None:
                    f()
                    be.synchronize()

                def widened(f: Callable[[], Any] = fn) -> None:
                    be.low_precision_ops = listed - ROW_OPS
                    try:
                        f()
                        be.synchronize()
                    finally:
                        be.low_precision_ops = listed

                def float32(f: Callable[[], Any] = wide32[op]) -> None:
                    f()
                    be.synchronize()

                ms = round_robin({"native": synced, "widened": widened, "float32": float32}, reps)
                out.append({
                    "op": op, "rows": rows, "dtype": dtype.name,
                    "native_ms": ms["native"] * 1e3, "widened_ms": ms["widened"] * 1e3,
                    "float32_ms": ms["float32"] * 1e3,
                    "widened/native": ms["widened"] / ms["native"],
                    "native/float32": ms["native"] / ms["float32"],
                })  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    rows = bench(a.backend, a.reps)
    info = machine()
    print(f"# {info['summary']}")
    cols = ["op", "rows", "dtype", "native_ms", "widened_ms", "float32_ms", "widened/native",
            "native/float32"]  # fmt: skip
    print(table(rows, cols))
    path = write_json("half_row_ops", {"backend": a.backend, "rows": rows, "machine": info})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
