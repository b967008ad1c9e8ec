"""One summary of a bench/gpu_check.sh run: each stage's verdict, then each speed target
(issue 15), met or not, with numbers.

Reads the JSON files the check wrote into DIR and writes DIR/summary.json; prints a table.

    python bench/gpu_summary.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _stages(path: Path) -> list[dict[str, Any]]:
    """stages.tsv, which bench/gpu_check.sh appends to as each stage ends."""
    try:
        lines = path.read_text().splitlines()[1:]
    except OSError:
        return []
    rows = []
    for line in lines:
        name, rc, seconds, limit = (line.split("\t") + ["", "", "", ""])[:4]
        verdict = "pass" if rc == "0" else ("timed out" if rc in ("124", "137") else "FAIL")
        rows.append({"stage": name, "exit": rc, "seconds": seconds, "limit": limit,
                     "verdict": verdict})  # fmt: skip
    return rows


def summarize(folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["stages"] = _stages(folder / "stages.tsv")
    out["passed"] = bool(out["stages"]) and all(r["verdict"] == "pass" for r in out["stages"])
    smoke = _load(folder / "smoke.json")
    if isinstance(smoke, dict):
        out["smoke"] = [
            f"{r.get('step')}: {'ok' if r.get('ok') else 'FAIL ' + str(r.get('error', ''))}"
            for r in smoke.get("steps", [])
        ]
    conf = _load(folder / "conformance.json")
    if isinstance(conf, dict):
        out["conformance"] = {"passed": conf.get("passed"), **(conf.get("summary") or {})}
    kern = _load(folder / "gpu_kernels.json") or {}
    out["copy_bandwidth_GBps"] = kern.get("copy_bandwidth_GBps")
    mem = [r for r in kern.get("memory_bound", []) if r.get("meets_target") is not None]
    out["memory_bound_ops_meeting_70pct"] = f"{sum(r['meets_target'] for r in mem)}/{len(mem)}"
    out["memory_bound_worst"] = min(
        ((r["op"], round(r["share_of_copy"], 3)) for r in mem), key=lambda t: t[1], default=None
    )
    mm = [r for r in kern.get("matmul_fp32", []) if r.get("share_of_cublas") is not None]
    auto = [r for r in mm if r["kernel"] == "auto"]
    out["matmul_auto_share_of_cublas"] = {
        f"{r['m=n=k']}{'NT' if r['transpose_b'] else 'NN'}": round(r["share_of_cublas"], 3)
        for r in auto
    }
    best = max(mm, key=lambda r: r["share_of_cublas"], default=None)
    out["matmul_best"] = (
        {k: best[k] for k in ("m=n=k", "transpose_b", "kernel", "GFLOPs", "share_of_cublas")}
        if best
        else None
    )
    train = _load(folder / "gpu_train.json") or {}
    out["train_large_target_met"] = train.get("large_target_met")
    out["train_rows"] = [
        {k: r.get(k) for k in ("config", "contender", "median_ms", "vs_torch_cuda")}
        for c in train.get("configs", {}).values()
        for r in c.get("rows", [])
    ]
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(sys.argv[1])
    summary = summarize(folder)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    for key, value in summary.items():
        print(f"{key:34s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
