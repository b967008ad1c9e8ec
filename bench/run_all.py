"""Run every benchmark, write bench/results/*.json, print one markdown summary for README.

Each benchmark runs in its own process (thread-count variables act before numpy loads;
memory peaks start clean); one that fails is reported and the others still run.

    python bench/run_all.py [--quick] [--threads N] [--backends cpu,opencl]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import RESULTS, cpu_model  # noqa: E402

TARGETS = {"raw_x": 8.0, "autograd_x": 12.0, "flash_ratio": 10.0, "vs_torch": 0.8}


def run(name: str, args: list[str], timeout: int) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / f"{name}.py"), *args]
    print(f"$ {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, timeout=timeout, check=False)
        status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        status = f"timed out after {timeout}s"
    return {"bench": name, "status": status, "seconds": round(time.perf_counter() - t0, 1)}


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _f(v: Any, digits: int = 3) -> str:
    if v is None or v == "":
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_f(c) for c in r) + " |" for r in rows]
    return out


def summary() -> str:
    lines: list[str] = []
    ts = load("train_step")
    head = (ts or {}).get("machine", {})
    load_avg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines.append(f"Measured {head.get('date', time.strftime('%Y-%m-%d'))} on {cpu_model()} "
                 f"({os.cpu_count()} cores; load average after the run {load_avg}), "
                 f"numpy {head.get('numpy', '?')}, riftco {head.get('riftco', '?')}.")  # fmt: skip
    if head.get("summary"):
        lines.append(f"Machine: {head['summary']}.")
    if ts:
        lines += ["", f"**Training step** (forward + backward + AdamW, float32), ms per step, "
                  f"median / min of {ts['steps']} interleaved steps, {ts['threads']} threads "
                  "for BLAS and PyTorch:", ""]  # fmt: skip
        rows = [[r["config"], r["contender"], r["median_ms"], r["min_ms"], r.get("vs_torch")]
                for r in ts["rows"]]  # fmt: skip
        lines += md_table(["config", "contender", "median ms", "min ms", "× PyTorch"], rows)
        skipped = [s for v in ts.get("skipped", {}).values() for s in v]
        if skipped:
            lines += ["", "Not run: " + "; ".join(sorted(set(skipped)))]
        lines += worst_ratio(ts["rows"])
    lines += capture_section(load("capture"))
    lines += flash_section(load("native_flash"))
    dp = load("dispatch")
    if dp:
        lines += ["", "**Dispatch overhead** on 4-element tensors, µs per call and × the "
                  f"equivalent numpy call (targets: raw ≤ {TARGETS['raw_x']:g}×, autograd ≤ "
                  f"{TARGETS['autograd_x']:g}×):", ""]  # fmt: skip
        rows = [[r["backend"], r["kind"], r["op"], r["us"], r.get("numpy_us"), r.get("x_numpy")]
                for r in dp["ops"]]  # fmt: skip
        lines += md_table(["backend", "kind", "op", "µs", "plain numpy µs", "× numpy"], rows)
        calls = [[c["backend"], c["config"], c["attention"], c["calls"]]
                 for c in dp["calls_per_step"]]  # fmt: skip
        lines += ["", "Backend calls per training step:", ""]
        lines += md_table(["backend", "config", "attention", "calls"], calls)
    mem = load("memory")
    if mem:
        shape = mem.get("attention_shape", {})
        lines += ["", "**Memory**: extra peak bytes held by the backend (`memory_stats()`), MB; "
                  f"attention alone is forward + backward at B={shape.get('B')}, "
                  f"H={shape.get('H')}, D={shape.get('D')}:", ""]  # fmt: skip
        rows = [[r["backend"], r["what"], r["variant"], r["extra_MB"],
                 r.get("materialized/flash")] for r in mem["rows"]]  # fmt: skip
        lines += md_table(["backend", "measured", "variant", "extra MB", "materialised/flash"],
                          rows)  # fmt: skip
    return "\n".join(lines)


def worst_ratio(rows: list[dict[str, Any]]) -> list[str]:
    """The issue-22 milestone reads the worst native ratio, not the best."""
    native = [r for r in rows if r.get("backend") == "native" and r.get("vs_torch")]
    if not native:
        return []
    out = ["", f"Worst riftco native / PyTorch (target ≤ {TARGETS['vs_torch']:g}):"]
    for captured in (False, True):
        pick = [r for r in native if bool(r.get("captured")) == captured]
        if pick:
            w = max(pick, key=lambda r: r["vs_torch"])
            out.append(f"- {'captured' if captured else 'eager'}: {w['vs_torch']:.3g} "
                       f"({w['config']}, {w['attention']})")  # fmt: skip
    return out


def capture_section(cap: dict[str, Any] | None) -> list[str]:
    if not cap:
        return []
    lines = ["", "**Capture and replay** (`riftco.capture`), ms per step, eager vs replayed, "
             "interleaved; host ms = step time outside backend calls:", ""]  # fmt: skip
    rows = [[r["backend"], r["config"], r["eager_ms"], r["captured_ms"], r["ratio"],
             r["eager_host_ms"], r["captured_host_ms"], r["host_share_captured"],
             r["captured_calls"], r["captured_launches"], r["captured_waits"], r["bitwise"]]
            for r in cap["rows"]]  # fmt: skip
    return lines + md_table(["backend", "config", "eager ms", "replayed ms", "ratio",
                             "eager host ms", "replayed host ms", "host share", "calls",
                             "launches", "waits", "bitwise"], rows)  # fmt: skip


def flash_section(nf: dict[str, Any] | None) -> list[str]:
    if not nf:
        return []
    by_t: dict[int, dict[str, float]] = {}
    for r in nf["rows"]:
        if r.get("kernels", "new") == "new":
            by_t.setdefault(r["T"], {})[r["attention"]] = r["f+b ms"]
    rows = [[t, v.get("materialised"), v.get("flash"),
             v["flash"] / v["materialised"] if "flash" in v and "materialised" in v else None]
            for t, v in sorted(by_t.items())]  # fmt: skip
    return ["", "**Native attention**, forward + backward ms (causal, B=16, H=4, D=32), "
            "flash vs materialised: the crossover", ""] + md_table(
        ["T", "materialised ms", "flash ms", "flash / mat"], rows)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--backends", default="", help="default: every available backend")
    args = ap.parse_args()
    quick = ["--quick"] if args.quick else []
    be = ["--backends", args.backends] if args.backends else []
    runs = [
        run("train_step", [*quick, *be, "--threads", str(args.threads)], 3000),
        run("dispatch", [*quick, "--backends", args.backends or "cpu,native"], 900),
        run("memory", [*quick, *be], 900),
        run("objective", ["--repeat", "10" if args.quick else "30"], 600),
        run("capture", ["--steps", "10" if args.quick else "40", *be], 900),
        run(
            "native_flash",
            [
                "--T",
                "64,256" if args.quick else "64,128,256,512,1024",
                "--reps",
                "5" if args.quick else "15",
            ],
            900,
        ),  # fmt: skip
    ]
    text = summary()
    (RESULTS / "summary.md").write_text(text + "\n")
    print()
    for r in runs:
        print(f"{r['bench']}: {r['status']} ({r['seconds']} s)")
    print()
    print(text)
    if any(r["status"] != "ok" for r in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
