"""Per-op throughput on the device under test: GB/s moved and GFLOP/s computed.

Each op unit names one large parameter set (``Samples.bench``) and a cost model
(``OpUnit.cost``: bytes and flops of a call). The op runs once to warm up (compilation,
caches), then a few times between device synchronisations; the best time counts. These are
indicative numbers for the certificate, not a benchmark: ``bench/`` does careful,
interleaved comparisons.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Any

import riftco
from riftco.ops.opunit import OpUnit, units
from riftco.ops.samples import Ctx

from .inputs import upload_args

REPEATS = 3
#: an op slower than this (seconds) is timed once after its warm-up
SLOW_S = 0.25


@dataclass
class Throughput:
    op: str
    dtype: str
    mode: str
    seconds: float
    gbytes_per_s: float
    gflops_per_s: float
    shape: str
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "dtype": self.dtype,
            "mode": self.mode,
            "best_time_s": self.seconds,
            "gb_per_s": round(self.gbytes_per_s, 3),
            "gflop_per_s": round(self.gflops_per_s, 3),
            "example": self.shape,
            "error": self.error,
        }


def measure(backend: Any, ctx: Ctx, wanted: Any = None) -> list[Throughput]:
    """One row per op unit that has a bench example and a cost model."""
    rows = []
    for unit in units():
        samples = unit.samples
        if samples is None or samples.bench is None or unit.cost is None:
            continue
        if wanted is not None and not wanted(unit.name):
            continue
        if samples.needs_index and not ctx.index_dtypes:
            continue
        rows.append(_one(unit, backend, ctx))
    return rows


def _one(unit: OpUnit, backend: Any, ctx: Ctx) -> Throughput:
    samples = unit.samples
    assert samples is not None and samples.bench is not None and unit.cost is not None
    mode = "native" if unit.is_native(backend) else "composite"
    params = {"seed": 0, "layout": "dense", "label": "bench", **samples.bench}
    try:
        ex = samples.build(params, ctx)
        fn = unit.function or getattr(riftco.ops, unit.name)
        best = float("inf")
        args: list[Any] = []
        runs = REPEATS + 1
        i = 0
        while i < runs:
            args = upload_args(ex, backend, ctx.dtype, reference=False)
            backend.synchronize()
            start = time.perf_counter()
            samples.call(fn, args, ex.kwargs)
            backend.synchronize()
            took = time.perf_counter() - start
            if i:  # the first run compiles and warms caches
                best = min(best, took)
            elif took > SLOW_S:
                runs = 2  # a slow op (a composite on a naive backend): one timed run is enough
            i += 1
        nbytes, flops = unit.cost(call_arguments(fn, args, ex.kwargs))
    except Exception as exc:  # noqa: BLE001 - reported in the row, never fatal
        return Throughput(unit.name, ctx.dtype.name, mode, float("nan"), 0.0, 0.0, "",
                          f"{type(exc).__name__}: {exc}")  # fmt: skip
    shapes = ", ".join(a.describe() for a in ex.arrays())
    return Throughput(
        unit.name, ctx.dtype.name, mode, best,
        nbytes / best / 1e9 if best > 0 else 0.0, flops / best / 1e9 if best > 0 else 0.0, shapes,
    )  # fmt: skip


def call_arguments(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    """The call's arguments in signature order, keywords at their places and defaults
    filled in: what a cost model unpacks (matmul's flags arrive as keywords)."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return list(bound.arguments.values())


def table(rows: list[Throughput]) -> str:
    lines = [f"{'op':<26} {'mode':<9} {'dtype':<8} {'ms':>8} {'GB/s':>8} {'GFLOP/s':>8}  example"]
    for r in rows:
        ms = "error" if r.error else f"{r.seconds * 1e3:8.3f}"
        lines.append(
            f"{r.op:<26} {r.mode:<9} {r.dtype:<8} {ms:>8} {r.gbytes_per_s:8.2f} "
            f"{r.gflops_per_s:8.2f}  {r.error or r.shape}"
        )
    return "\n".join(lines)
