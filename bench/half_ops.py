"""What float16 and bfloat16 cost per op, against float32, on each backend that declares them.

    python bench/half_ops.py [--backends cpu,native,opencl] [--quick] [--json FILE]

An op on half operands either runs in half storage on the backend (the op is in its
``low_precision_ops``: half the bytes moved) or is widened by core (``riftco.ops.widen``:
a cast to float32, the float32 op, a cast back: more passes over memory than float32
alone). This times each op in float32, float16 and bfloat16, the calls interleaved round
robin (``common.round_robin``) so every dtype sees the same machine load, and prints the
half / float32 ratio with the path each op took. Numbers are this machine's (printed);
compare ratios, not milliseconds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import machine, round_robin, table, write_json  # noqa: E402


def _cases(quick: bool) -> dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]]:
    from riftco import ops

    n = 256 if quick else 1024
    return {
        "add": (lambda a, b: ops.add(a, b), [(n, n), (n, n)]),
        "gelu": (lambda a: ops.gelu(a), [(n, n)]),
        "softmax": (lambda a: ops.softmax(a), [(n, n)]),
        "layer_norm": (lambda a, g, b: ops.layer_norm(a, g, b)[0], [(n, n), (n,), (n,)]),
        "matmul": (lambda a, b: ops.matmul(a, b), [(n // 2, n // 2), (n // 2, n // 2)]),
    }


def measure(backend_name: str, quick: bool) -> list[dict[str, Any]]:
    import riftco
    from riftco import dtypes

    dev = riftco.device(backend_name)
    be = dev.backend
    halves = [d for d in (dtypes.float16, dtypes.bfloat16) if d is not None and d in be.dtypes]
    if not halves:
        return [{"backend": backend_name, "op": "-", "note": "declares no half dtype"}]
    rng = np.random.default_rng(0)
    rows = []
    for op, (fn, shapes) in _cases(quick).items():
        host = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        calls = {}
        for dt in (dtypes.float32, *halves):
            args = [riftco.tensor(h.astype(dt), device=dev) for h in host]

            def call(args: list[Any] = args, fn: Callable[..., Any] = fn) -> None:
                fn(*args)
                be.synchronize()

            calls[dt.name] = call
        times = round_robin(calls, repeat=5 if quick else 15)
        native = op in getattr(be, "low_precision_ops", ())
        for dt in halves:
            rows.append({
                "backend": backend_name, "op": op, "shape": "x".join(map(str, shapes[0])),
                "dtype": dt.name, "path": "half storage" if native else "widened",
                "float32_ms": round(times["float32"] * 1e3, 3),
                "half_ms": round(times[dt.name] * 1e3, 3),
                "half_over_float32": round(times[dt.name] / times["float32"], 2),
            })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="cpu,native,opencl")
    p.add_argument("--quick", action="store_true", help="256-wide operands, 5 rounds")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    import riftco

    rows: list[dict[str, Any]] = []
    for name in args.backends.split(","):
        try:
            riftco.device(name)
        except Exception as exc:  # not available here: say so, measure the rest
            rows.append({"backend": name, "op": "-", "note": f"unavailable: {exc}"[:120]})
            continue
        rows.extend(measure(name, args.quick))
    payload = {"machine": machine(), "rows": rows}
    cols = ("backend", "op", "shape", "dtype", "path", "float32_ms", "half_ms",
            "half_over_float32", "note")  # fmt: skip
    print(table(rows, cols))
    out = write_json("half_ops", payload) if args.json is None else args.json
    if args.json is not None:
        import json

        args.json.write_text(json.dumps(payload, indent=1))
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
