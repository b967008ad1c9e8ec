"""ms per embedding backward on the kernel backends: the direct kernel vs the sort plan.

The direct kernel walks every id for every output element (O(n * V * C)); the sort plan
(core/kernel_host/fused_embedding.py) radix-sorts (id, position) pairs and sums each row's segment
(O(n + V * C), six or more launches). Both give the same bits; the host picks the direct
kernel only while n * V <= 2^14. Cases: the tiny Shakespeare model (V 65), a GPT-2-sized
vocabulary (V 50,257), and a padding id repeated over a long batch.

    python bench/embedding_backward.py [--backends opencl] [--repeat 7] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import riftco  # noqa: E402
from common import machine, summarize, table, time_calls, write_json  # noqa: E402
from riftco import ops as F  # noqa: E402
from riftco.kernel_host import fused_embedding  # noqa: E402

CASES = {  # name: (n ids, V, C, padding share)
    "shakespeare": (1024, 65, 128, 0.0),
    "gpt2-vocab": (8192, 50_257, 64, 0.0),
    "padded": (65_536, 1000, 32, 0.5),
}
DIRECT_LIMIT = 3e10  # skip the direct kernel above this many id visits (n * V * C)
SLOW = 1e9  # above this many, time the direct kernel once


def _ids(n: int, v: int, pad: float, rng: np.random.Generator) -> np.ndarray:
    ids = rng.integers(0, v, n).astype(np.int32)
    ids[: int(n * pad)] = 0
    rng.shuffle(ids)
    return ids


def run(backend: str, repeat: int, quick: bool) -> list[dict[str, Any]]:
    dev = riftco.device(backend)
    be = dev.backend
    rng = np.random.default_rng(0)
    rows = []
    for name, (n, v, c, pad) in CASES.items():
        if quick:
            n = max(64, n // 8)
        ids = be.from_numpy(_ids(n, v, pad, rng))
        dy = be.from_numpy(rng.normal(size=(n, c)).astype(np.float32))
        results = {}
        for plan, limit in (("direct", 1 << 62), ("sort", 0)):
            if plan == "direct" and n * v * c > DIRECT_LIMIT:
                results[plan] = None
                continue
            fused_embedding._EMBEDDING_DIRECT_MAX = limit

            def call(dy: Any = dy, ids: Any = ids, v: int = v) -> None:
                F.embedding_backward(dy, ids, v)
                be.synchronize()

            slow = plan == "direct" and n * v * c > SLOW
            results[plan] = summarize(time_calls(call, 1 if slow else repeat, 0 if slow else 2))
        fused_embedding._EMBEDDING_DIRECT_MAX = 1 << 14
        direct, sort = results["direct"], results["sort"]
        rows.append({
            "backend": backend, "case": name, "n": n, "V": v, "C": c,
            "direct_ms": direct["median_ms"] if direct else float("nan"),
            "sort_ms": sort["median_ms"],
            "speedup": direct["median_ms"] / sort["median_ms"] if direct else float("nan"),
        })  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backends", default="opencl")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rows = []
    for backend in args.backends.split(","):
        try:
            rows += run(backend, args.repeat, args.quick)
        except Exception as exc:  # an unavailable backend is reported, not fatal
            print(f"skipping {backend}: {type(exc).__name__}: {exc}")
    path = write_json("embedding_backward", {"machine": machine(), "rows": rows})
    cols = ["backend", "case", "n", "V", "C", "direct_ms", "sort_ms", "speedup"]
    print(table(rows, cols))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
