"""The conformance table (what a person reads) and the JSON report (what CI keeps)."""

from __future__ import annotations

import math
import os
import platform
import time
from collections import Counter
from typing import Any, TextIO

import riftco
from riftco.backend import PROTOCOL_VERSION

from .provenance import coverage, library_versions, scrub
from .results import CaseResult
from .suite import Target

HEADER = ("case", "dtype", "mode", "max abs err", "max rel err", "tolerance", "result", "time")
WIDTHS = (38, 8, 10, 11, 11, 23, 6, 7)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2e}"


def _tol(r: CaseResult) -> str:
    if not r.tolerance:
        return "-"
    return f"a={r.tolerance['atol']:.0e} r={r.tolerance['rtol']:.0e}"


def row(r: CaseResult) -> str:
    cells = (
        r.case_id,
        r.dtype,
        r.mode,
        _num(r.max_abs),
        _num(r.max_rel),
        _tol(r),
        r.status.upper(),
        f"{r.time_s:.2f}s",
    )
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, WIDTHS, strict=False)).rstrip()


def header() -> str:
    line = "  ".join(h.ljust(w) for h, w in zip(HEADER, WIDTHS, strict=False)).rstrip()
    return f"{line}\n{'-' * len(line)}"


def explain(r: CaseResult) -> str:
    """The indented lines under a row that is not a plain pass."""
    lines = []
    if r.reason:
        lines.append(f"    {r.status}: {r.reason}")
    if r.example:
        lines.append(f"    example: {r.example}")
    return "\n".join(lines)


def summary(results: list[CaseResult], strict: bool) -> dict[str, int]:
    counts = Counter(r.status for r in results)
    out = {k: counts.get(k, 0) for k in ("pass", "fail", "error", "skip", "xfail", "xpass")}
    out["total"] = len(results)
    out["failed"] = sum(r.failed(strict) for r in results)
    return out


def summary_line(label: str, results: list[CaseResult], strict: bool, wall: float) -> str:
    s = summary(results, strict)
    words = {"pass": "passed", "fail": "failed", "skip": "skipped", "error": "errors"}
    parts = [
        f"{s[k]} {words.get(k, k)}"
        for k in ("pass", "fail", "error", "skip", "xfail", "xpass")
        if s[k] or k == "pass"
    ]
    verdict = "FAILED" if s["failed"] else "OK"
    return f"{label}: {verdict}: {s['total']} cases: {', '.join(parts)} in {wall:.1f}s"


def print_failures(results: list[CaseResult], stream: TextIO, strict: bool) -> None:
    bad = [r for r in results if r.failed(strict)]
    if not bad:
        return
    print(f"\nFailures ({len(bad)}):", file=stream)
    for r in bad:
        print(row(r), file=stream)
        print(explain(r), file=stream)


#: CPU features worth naming on a certificate: they decide which kernels a CPU backend runs.
_NOTABLE_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "asimd", "sve")


def machine() -> dict[str, str]:
    """Where the run happened: enough for someone else to reproduce or compare it."""
    import numpy as np

    cpu, flags = platform.processor() or "", ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            info = dict(ln.split(":", 1) for ln in fh.read().split("\n\n")[0].splitlines()
                        if ":" in ln)  # fmt: skip
        info = {k.strip(): v.strip() for k, v in info.items()}
        cpu = info.get("model name", cpu)
        present = set((info.get("flags") or info.get("Features") or "").split())
        flags = ", ".join(f for f in _NOTABLE_FLAGS if f in present)
    except OSError:
        pass
    return {
        "system": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu": cpu,
        "cpu_flags": flags,
        "cores": str(os.cpu_count() or "?"),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def json_report(
    targets: list[tuple[Target, list[CaseResult], float]],
    settings: dict[str, Any],
    unmatched: list[dict[str, str]],
    strict: bool,
    throughput: dict[str, list[dict[str, Any]]] | None = None,
    complete: bool = True,
    command: str = "",
) -> dict[str, Any]:
    """The report; ``command`` is the line that reruns it (see ``provenance.command``)."""
    first = targets[0][0].entry
    devices = []
    for target, results, wall in targets:
        dev = target.entry.devices()[target.index]
        checked = [d.name for d in target.checked_dtypes()] if target.backend is not None else []
        devices.append(
            {
                "device": target.label,
                "device_name": dev.name,
                "device_dtypes": list(dev.dtypes),
                "device_details": {k: str(v) for k, v in dev.details.items()},
                "wall_time_s": round(wall, 3),
                "summary": summary(results, strict),
                "cases": [r.as_dict() for r in results],
                "throughput": (throughput or {}).get(target.label, []),
                "coverage": coverage(target.entry.cls, checked),
            }
        )
    all_results = [r for _, results, _ in targets for r in results]
    return _finite(
        scrub(
            {
                "backend": first.name,
                "command": command,
                "distribution": first.distribution,
                "distribution_version": first.dist_version,
                "libraries": library_versions(first.distribution, first.cls),
                "protocol_version": list(first.protocol_version or ()),
                "riftco_version": riftco.__version__,
                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "riftco_protocol_version": list(PROTOCOL_VERSION),
                "reference": "cpu float64",
                "python": platform.python_version(),
                "machine": machine(),
                "complete": complete,
                "settings": settings,
                "passed": complete and not any(r.failed(strict) for r in all_results),
                "summary": summary(all_results, strict),
                "unmatched_expectations": unmatched,
                "devices": devices,
            }
        )
    )


def _finite(obj: Any) -> Any:
    """JSON has no inf/NaN: write them as strings so strict parsers accept the report."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
