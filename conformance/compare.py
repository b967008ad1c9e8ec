"""``riftco conformance --compare OLD.json``: what got worse between two certificates.

A regression is a case that the old report counted as good (pass, xfail, xpass) and the new
one counts as failed (fail, error) or skipped, or an optional op that was native and now
runs core's composite. A case only one report ran (a narrower ``--ops``) is neither. Cases
are matched by id on the device of the same label; when each report has one device, on
that device whatever its label (the same backend on another machine).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_GOOD = frozenset({"pass", "xfail", "xpass"})
_WORSE = frozenset({"fail", "error", "skip"})


@dataclass
class Comparison:
    regressions: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    closer: list[str] = field(default_factory=list)  # still passing, much nearer the tolerance
    only_old: int = 0
    only_new: int = 0


def load(path: str) -> dict[str, Any]:
    """A JSON report, or a clear error naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--compare: cannot read the report {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        raise ValueError(f"--compare: {path} is not a riftco conformance JSON report")
    return data


def _pairs(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, dict, dict]]:
    olds = {d["device"]: d for d in old["devices"]}
    news = {d["device"]: d for d in new["devices"]}
    if len(olds) == 1 and len(news) == 1:
        (label, o), (_, n) = next(iter(olds.items())), next(iter(news.items()))
        return [(label, o, n)]
    return [(label, olds[label], news[label]) for label in news if label in olds]


def _ratio(x: Any) -> float | None:
    if x is None:
        return None
    return float(x)  # "inf" after the JSON round trip reads back as float("inf")


def compare(old: dict[str, Any], new: dict[str, Any]) -> Comparison:
    out = Comparison()
    for label, o, n in _pairs(old, new):
        before = {c["id"]: c for c in o["cases"]}
        after = {c["id"]: c for c in n["cases"]}
        out.only_old += len(before.keys() - after.keys())
        out.only_new += len(after.keys() - before.keys())
        for cid, c in after.items():
            prev = before.get(cid)
            if prev is None:
                continue
            was, now = prev["status"], c["status"]
            if was in _GOOD and now in _WORSE:
                why = f": {c['reason']}" if c.get("reason") else ""
                out.regressions.append(f"{label} {cid}: {was} -> {now}{why}")
            elif was in ("fail", "error") and now == "pass":
                out.fixed.append(f"{label} {cid}: {was} -> pass")
            elif was == now == "pass":
                r0, r1 = _ratio(prev.get("err_ratio")), _ratio(c.get("err_ratio"))
                if r0 is not None and r1 is not None and r1 > 0.1 and r1 > 2 * r0:
                    out.closer.append(f"{label} {cid}: err / allowed {r0:.2g} -> {r1:.2g}")
        cov0, cov1 = o.get("coverage") or {}, n.get("coverage") or {}
        lost = sorted(set(cov0.get("optional_native", [])) - set(cov1.get("optional_native", [])))
        out.regressions += [f"{label} {op}: native -> composite" for op in lost]
    return out


def format_comparison(c: Comparison, old_path: str) -> str:
    lines = [f"compared with {old_path}: {len(c.regressions)} regression(s), "
             f"{len(c.fixed)} fixed, {c.only_old} case(s) only in the old report, "
             f"{c.only_new} only in the new"]  # fmt: skip
    for title, items in (("regressions", c.regressions), ("fixed", c.fixed),
                         ("passing, but nearer the tolerance", c.closer)):  # fmt: skip
        if items:
            lines.append(f"{title}:")
            lines += [f"  {item}" for item in items]
    return "\n".join(lines)
