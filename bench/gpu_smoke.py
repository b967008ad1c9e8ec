"""The first minute on a new GPU: one op of each kind, each checked, stopping at the first
failure (bench/gpu_check.sh runs it before anything long).

Every launch is synchronised (``RIFTCO_CUDA_SYNC=1``, set here), so a kernel that faults
is named by its own error instead of surfacing at a later download and blaming another.
The path: from_numpy -> add -> matmul (the 64x64 tiled kernel and the 128x128 wide one)
-> softmax -> embedding with a bad id (a DomainError, after which the device still works)
-> to_numpy. Each step prints ``ok``/``FAIL``, its time and its error against float64
numpy; the exit status is 0 only when every step passed (1 on a wrong value or an error,
2 when the backend cannot start).

    python bench/gpu_smoke.py [--device cuda:0] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

os.environ.setdefault("RIFTCO_CUDA_SYNC", "1")

import numpy as np  # noqa: E402

Step = Callable[[Any, np.random.Generator], float]


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got64.shape != want64.shape:
        raise AssertionError(f"shape {got64.shape}, expected {want64.shape}")
    return float(np.max(np.abs(got64 - want64) / (1.0 + np.abs(want64)), initial=0.0))


def _round_trip(b: Any, rng: np.random.Generator) -> float:
    a = rng.standard_normal((3, 1000)).astype(np.float32)
    got = b.from_numpy(a).numpy()
    if not np.array_equal(got, a):
        raise AssertionError("from_numpy -> to_numpy changed the bits")
    return 0.0


def _add(b: Any, rng: np.random.Generator) -> float:
    import riftco.ops as ops

    x, y = (rng.standard_normal((257, 130)).astype(np.float32) for _ in range(2))
    return _rel_err(ops.add(b.from_numpy(x), b.from_numpy(y)).numpy(), x.astype(np.float64) + y)


def _matmul(m: int, k: int, n: int) -> Step:
    def run(b: Any, rng: np.random.Generator) -> float:
        import riftco.ops as ops

        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        got = ops.matmul(b.from_numpy(x), b.from_numpy(w), False, True).numpy()
        return _rel_err(got, x.astype(np.float64) @ w.T.astype(np.float64)) / np.sqrt(k)

    return run


def _softmax(b: Any, rng: np.random.Generator) -> float:
    import riftco.ops as ops

    x = (4 * rng.standard_normal((67, 1025))).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True).astype(np.float64))
    return _rel_err(ops.softmax(b.from_numpy(x)).numpy(), e / e.sum(axis=1, keepdims=True))


def _embedding_bad_id(b: Any, rng: np.random.Generator) -> float:
    import riftco
    import riftco.ops as ops

    table = rng.standard_normal((50, 33)).astype(np.float32)
    ids = np.array([[3, 49, 0], [7, 50, 1]], dtype=np.int32)  # 50 is out of range
    try:
        ops.embedding(b.from_numpy(table), b.from_numpy(ids)).numpy()
    except riftco.DomainError as exc:
        if not str(exc).startswith("[embedding]"):
            raise AssertionError(f"the DomainError does not name the op: {exc}") from None
    else:
        raise AssertionError("an id of 50 in a 50-row table raised no DomainError")
    good = ids.clip(0, 49)
    got = ops.embedding(b.from_numpy(table), b.from_numpy(good)).numpy()
    return _rel_err(got, table[good])  # the device still works after the error


STEPS: list[tuple[str, Step]] = [
    ("from_numpy/to_numpy", _round_trip),
    ("add", _add),
    ("matmul tiled 96x200x80", _matmul(96, 200, 80)),
    ("matmul wide 2048x512x2048", _matmul(2048, 512, 2048)),
    ("softmax 67x1025", _softmax),
    ("embedding bad id, then good ids", _embedding_bad_id),
]
TOL = 1e-5


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    try:
        import riftco

        backend = riftco.device(args.device).backend
    except Exception as exc:  # the backend cannot start: that is the finding
        print(f"FAIL start {args.device}: {type(exc).__name__}: {exc}")
        traceback.print_exc()
        _write(args.json, [{"step": "start", "ok": False, "error": f"{exc}"}])
        return 2
    rng = np.random.default_rng(0)
    status = 0
    for name, step in STEPS:
        start = time.perf_counter()
        row: dict[str, Any] = {"step": name}
        try:
            err = float(step(backend, rng))
            row.update(ok=bool(err <= TOL), max_rel_err=err)
            note = f"max rel err {err:.2e}" + ("" if err <= TOL else f" > {TOL:.0e}")
        except Exception as exc:  # noqa: BLE001 - reported, and the smoke stops here
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}")
            note = row["error"]
            traceback.print_exc()
        row["ms"] = round(1e3 * (time.perf_counter() - start), 2)
        rows.append(row)
        print(f"{'ok  ' if row['ok'] else 'FAIL'} {name:34s} {row['ms']:9.1f} ms  {note}")
        if not row["ok"]:
            status = 1
            break
    _write(args.json, rows)
    return status


def _write(path: str, rows: list[dict[str, Any]]) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"steps": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
