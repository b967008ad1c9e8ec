"""Shared bench plumbing: timing, machine facts, JSON + table output.

Benchmarks print numbers; they never assert. Compare contenders interleaved in one run
(ratios), because the machines these run on are shared and noisy.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """The full record of bench/machine.py (CPU, ISA, BLAS core, native build, PoCL and
    its target per OpenCL device, reference frameworks), plus the old flat keys."""
    import numpy as np
    from machine import describe, summary_line

    rec = describe()
    rec.update(cores=os.cpu_count(), numpy=np.__version__, summary=summary_line(rec))
    return rec


def time_calls(fn: Callable[[], Any], repeat: int, warmup: int = 2) -> list[float]:
    """Seconds per call, one sample per call, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def per_call_us(fn: Callable[[], Any], number: int) -> float:
    """Mean microseconds per call over ``number`` back-to-back calls (for tiny ops)."""
    fn()
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number * 1e6


def summarize(samples: Sequence[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(samples) * 1e3,
        "min_ms": min(samples) * 1e3,
        "n": len(samples),
    }


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def write_json(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    tmp.replace(path)
    return path


def id_batches(
    vocab: int, batch: int, context: int, n: int = 4, seed: int = 1234
) -> list[tuple[Any, Any]]:
    """``n`` (ids, next ids) int32 batches: the same data for every variant of a bench."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.integers(0, vocab, (batch, context)).astype(np.int32)
        out.append((x, np.roll(x, -1, axis=1)))
    return out


def launches(backend: Any, step: Callable[[], Any]) -> int | None:
    """Kernel launches ``step()`` makes on ``backend`` (None where it does not count them)."""
    if not hasattr(backend, "reset_transfer_stats"):
        return None
    backend.reset_transfer_stats()
    step()
    return int(backend.transfer_stats()["launches"])


def interleaved_ab(
    a: Callable[[int], Any], b: Callable[[int], Any], steps: int, block: int
) -> dict[str, list[float]]:
    """Seconds per call of ``a`` ("before") and ``b`` ("after"), in alternating blocks of
    ``block`` calls (A then B, B then A, ...) so both see the same machine load; each call
    gets its running index."""
    times: dict[str, list[float]] = {"before": [], "after": []}
    done = 0
    while done < steps:
        order = [("before", a), ("after", b)]
        if (done // block) % 2:
            order.reverse()
        for name, fn in order:
            for i in range(block):
                t0 = time.perf_counter()
                fn(done + i)
                times[name].append(time.perf_counter() - t0)
        done += block
    return times


def step_ab(
    a: Any, b: Any, batches: list[tuple[Any, Any]], steps: int, block: int
) -> tuple[dict[str, int | None], dict[str, list[float]]]:
    """A training-step A/B of two variants (each with ``.be`` and ``.step(x, y)``):
    two warm-up steps each (kernels compiled, optimizer state created), their launches
    per step, then :func:`interleaved_ab` over ``batches``. Returns ``(launches, times)``,
    both keyed "before" (a) and "after" (b)."""
    for v in (a, b):
        v.step(*batches[0])
        v.step(*batches[1])
    counts = {name: launches(v.be, lambda v=v: v.step(*batches[2]))
              for name, v in (("before", a), ("after", b))}  # fmt: skip
    times = interleaved_ab(lambda i: a.step(*batches[i % len(batches)]),
                           lambda i: b.step(*batches[i % len(batches)]), steps, block)  # fmt: skip
    return counts, times


def round_robin(
    fns: dict[str, Callable[[], Any]], repeat: int, warmup: int = 1
) -> dict[str, float]:
    """Median seconds per call of each function, the calls alternating round-robin (after
    ``warmup`` untimed calls each) so every contender sees the same machine load."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}
