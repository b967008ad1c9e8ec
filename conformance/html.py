"""The conformance certificate: one self-contained HTML page per run, fit to publish.

Made from the JSON report alone (so the two always agree), with inline CSS and no script
or external resource: it opens offline, attaches to an issue, and prints. The first screen
holds what a reader decides on: the verdict, the coverage summary (which optional ops are
native, which dtypes were checked, whether strided input is accepted, on which libraries
and CPU) and the command that reruns the check. Below come an op x dtype grid (each cell's
status and worst error as a fraction of the allowed error), the run's details, and every
case folded per op, then the model check and the per-op throughput.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:1.2em auto;max-width:1200px;
color:#1d1d1f;padding:0 1em}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.4em;border-bottom:1px solid #ddd}
.verdict{display:inline-block;padding:.3em .9em;border-radius:6px;font-weight:700;font-size:1.3em;
color:#fff}.pass{background:#1a7f37}.fail{background:#cf222e}.incomplete{background:#9a6700}
#summary{background:#eef4fb;border:1px solid #c8d8ec;border-radius:6px;padding:.5em 1em;
margin:.6em 0}#summary h2{margin:.1em 0 .3em;border:0}
#reproduce{background:#f3f0e6;border-radius:6px;padding:.5em 1em;font-size:13px;
font-family:ui-monospace,monospace;word-break:break-all}
table{border-collapse:collapse;width:100%;margin:.6em 0}th,td{padding:.25em .5em;text-align:left;
border-bottom:1px solid #eee;vertical-align:top}th{background:#f6f8fa}
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.bad td{background:#ffebe9}
tr.skip td{color:#777}.status{font-weight:600}.s-pass{color:#1a7f37}.s-fail,.s-error{color:#cf222e}
.s-skip,.s-xfail,.s-xpass{color:#9a6700}.detail{font-family:ui-monospace,monospace;font-size:12px;
white-space:pre-wrap;color:#57606a}dl{display:grid;grid-template-columns:max-content auto;
gap:.15em 1em;margin:.3em 0}dt{color:#57606a}dd{margin:0}
table.grid td{font-variant-numeric:tabular-nums;white-space:nowrap}table.grid td.cell-fail,
table.grid td.cell-error{background:#ffebe9}details{margin:.15em 0}summary{cursor:pointer}
.muted{color:#57606a}
"""

#: The status that wins when several cases meet in one grid cell or one op: worst first; a
#: skip shows only when nothing in the cell ran (a download has no capture case, say).
_RANK = ("error", "fail", "xpass", "xfail", "pass", "skip")


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: Any) -> str:
    return "-" if x is None or isinstance(x, str) else f"{x:.2e}"


def _ratio(x: Any) -> str:
    """Error as a fraction of the allowed error: 0.03 is well inside, above 1 fails."""
    if x is None:
        return "-"
    if isinstance(x, str) or x == float("inf"):
        return "inf"
    return f"{x:.2g}"


def _tol(t: Any) -> str:
    if not t:
        return "-"
    scale = t.get("atol_scale")
    extra = f" ×{scale:.3g}" if isinstance(scale, (int, float)) and scale not in (0, 1) else ""
    return f"atol {t['atol']:.0e}{extra}, rtol {t['rtol']:.0e}"


def _dl(items: Iterable[tuple[str, Any]]) -> str:
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items) + "</dl>"


def _worst(statuses: Iterable[str]) -> str:
    found = set(statuses)
    return next((s for s in _RANK if s in found), "pass")


def _max_ratio(cases: Iterable[dict[str, Any]]) -> Any:
    values = [c["err_ratio"] for c in cases if c.get("err_ratio") is not None]
    if any(isinstance(v, str) for v in values):  # "inf" after the JSON round trip
        return float("inf")
    return max(values, default=None)


def _table(head: tuple[str, ...], rows: list[str], cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + \
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"  # fmt: skip


def _cases(cases: list[dict[str, Any]]) -> str:
    head = ("case", "dtype", "mode", "max abs err", "max rel err", "err / allowed", "tolerance",
            "examples", "result", "time")  # fmt: skip
    rows = []
    for c in cases:
        status = c["status"]
        cls = "bad" if status in ("fail", "error") else "skip" if status == "skip" else ""
        lines = [c.get("reason") or ""]
        if c.get("failing_example"):
            lines.append("example: " + c["failing_example"])
        text = "\n".join(line for line in lines if line)
        detail = f'<div class="detail">{_e(text)}</div>' if text else ""
        rows.append(
            f'<tr class="{cls}"><td>{_e(c["id"])}{detail}</td>'
            f"<td>{_e(c['dtype'])}</td><td>{_e(c['mode'])}</td>"
            f'<td class="num">{_num(c.get("max_abs_err"))}</td>'
            f'<td class="num">{_num(c.get("max_rel_err"))}</td>'
            f'<td class="num">{_ratio(c.get("err_ratio"))}</td>'
            f"<td>{_e(_tol(c.get('tolerance')))}</td>"
            f'<td class="num">{_e(c.get("examples", 0))}</td>'
            f'<td class="status s-{_e(status)}">{_e(status.upper())}</td>'
            f'<td class="num">{c.get("time_s", 0):.2f}s</td></tr>'
        )
    return _table(head, rows)


def _throughput(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>Not measured in this run.</p>"
    head = ("op", "mode", "dtype", "best time", "GB/s", "GFLOP/s", "example")
    body = []
    for r in rows:
        ms = "error" if r.get("error") else "%.3f ms" % (float(r["best_time_s"]) * 1e3)
        body.append(
            f"<tr><td>{_e(r['op'])}</td><td>{_e(r['mode'])}</td><td>{_e(r['dtype'])}</td>"
            f'<td class="num">{ms}</td><td class="num">{r["gb_per_s"]:.2f}</td>'
            f'<td class="num">{r["gflop_per_s"]:.2f}</td>'
            f"<td>{_e(r.get('error') or r['example'])}</td></tr>"
        )
    return _table(head, body)


def _summary(report: dict[str, Any]) -> str:
    """The coverage box: what this certificate vouches for, in a few lines."""
    m = report.get("machine", {})
    cpu = m.get("cpu") or m.get("machine") or "?"
    cores = f", {m['cores']} cores" if m.get("cores") else ""
    cpu += f" ({m['cpu_flags']})" if m.get("cpu_flags") else ""
    libs = ", ".join(f"{k} {v}" for k, v in report.get("libraries", {}).items()) or "-"
    dist = f"{report['distribution']} {report['distribution_version']}".strip()
    items: list[tuple[str, Any]] = [
        ("backend", f"{report['backend']} ({dist}), protocol "
                    f"{'.'.join(map(str, report['protocol_version']))}"),
        ("libraries", libs),
    ]  # fmt: skip
    for dev in report["devices"]:
        cov = dev.get("coverage")
        if not cov:
            continue
        native, missing = cov["optional_native"], cov["optional_missing"]
        total = len(native) + len(missing)
        label = f" ({dev['device']})" if len(report["devices"]) > 1 else ""
        items += [
            (f"ops{label}", f"{cov['primitives']} required; {len(native)} of {total} optional "
                            "ops native"),
            (f"optional ops missing{label}",
             ", ".join(missing) + " (core runs their composites)" if missing else "none"),
            (f"dtypes checked{label}", ", ".join(cov["dtypes_checked"]) or "-"),
            (f"dtypes declared{label}", ", ".join(cov["dtypes"])),
            (f"strided input{label}", "accepted (core hands views over as they are)"
             if cov["accepts_strided"] else "not accepted (core copies views to dense first)"),
        ]  # fmt: skip
    items.append(("device", "; ".join(f"{d['device']} {d['device_name']}"
                                      for d in report["devices"])))  # fmt: skip
    items.append(("machine", f"{cpu}{cores}; {m.get('system', '')}"))
    return f'<section id="summary"><h2>Coverage</h2>{_dl(items)}</section>'


def _grid(cases: list[dict[str, Any]]) -> str:
    """One row per op, one column per dtype (plus the dtype-free error-contract checks)."""
    ops: dict[str, dict[str, list[dict[str, Any]]]] = {}
    modes: dict[str, str] = {}
    dtypes: list[str] = []
    for c in cases:
        if c["group"] in ("protocol", "model"):
            continue
        column = c["dtype"] if c["group"] in ("numeric", "capture") else "errors"
        if column not in dtypes and column != "errors":
            dtypes.append(column)
        ops.setdefault(c["op"], {}).setdefault(column, []).append(c)
        if c["group"] == "numeric" and not c["id"].endswith(",composite]"):
            modes.setdefault(c["op"], c["mode"])
    columns = [*dtypes, "errors"]
    rows = []
    for op, cells in ops.items():
        tds = []
        for col in columns:
            inside = cells.get(col, [])
            if not inside:
                tds.append('<td class="muted">-</td>')
                continue
            status = _worst(c["status"] for c in inside)
            ratio = _max_ratio(inside)
            shown = status.upper() + (f" {_ratio(ratio)}" if ratio is not None else "")
            tip = f"{len(inside)} case(s): " + ", ".join(c["id"] for c in inside)
            tds.append(f'<td class="cell-{status} s-{status}" title="{_e(tip)}">{_e(shown)}</td>')
        rows.append(f"<tr><td>{_e(op)}</td><td>{_e(modes.get(op, '-'))}</td>{''.join(tds)}</tr>")
    head = ("op", "mode", *columns)
    note = ("<p class=muted>Each cell: the worst status of its cases (native or primitive, "
            "core's composite on this backend, captured replay) and the worst error as a "
            "fraction of the allowed error (1 is the tolerance). <i>errors</i>: the error "
            "contract and domain checks.</p>")  # fmt: skip
    return note + _table(head, rows, "grid")


def _by_op(cases: list[dict[str, Any]]) -> str:
    """Every case, folded per op; an op with a failing case opens by itself."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        groups.setdefault(c["op"], []).append(c)
    out = []
    for op, inside in groups.items():
        status = _worst(c["status"] for c in inside)
        ratio = _max_ratio(inside)
        worst = f", worst err / allowed {_ratio(ratio)}" if ratio is not None else ""
        opened = " open" if status in ("fail", "error") else ""
        out.append(
            f"<details{opened}><summary><b>{_e(op)}</b> — {len(inside)} cases, "
            f'<span class="status s-{_e(status)}">{_e(status.upper())}</span>{_e(worst)}'
            f"</summary>{_cases(inside)}</details>"
        )
    return "".join(out)


def render(report: dict[str, Any]) -> str:
    """The whole page for one ``riftco conformance`` JSON report."""
    passed, complete = report["passed"], report.get("complete", True)
    verdict = "PASS" if passed else ("INCOMPLETE" if not complete else "FAIL")
    cls = "pass" if passed else ("incomplete" if not complete else "fail")
    s = report["summary"]
    title = f"riftco conformance: {report['backend']} — {verdict}"
    counts = ", ".join(
        f"{s[k]} {k}" for k in ("pass", "fail", "error", "skip", "xfail", "xpass") if s.get(k)
    )
    about = _dl([
        ("distribution", f"{report['distribution']} {report['distribution_version']}"),
        ("backend protocol", ".".join(map(str, report["protocol_version"]))),
        ("riftco", f"{report['riftco_version']} (protocol "
                   f"{'.'.join(map(str, report['riftco_protocol_version']))})"),
        ("reference", report["reference"]),
        ("date", report.get("date", "")),
        *[(k, v) for k, v in report.get("machine", {}).items()],
        ("settings", ", ".join(f"{k}={v}" for k, v in report["settings"].items())),
    ])  # fmt: skip
    command = report.get("command") or f"riftco conformance {report['backend']}"
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>riftco conformance certificate: {_e(report['backend'])}</h1>",
        f'<p><span class="verdict {cls}" id="verdict">{verdict}</span> '
        f"{_e(s['total'])} cases: {_e(counts)}</p>",
        _summary(report),
        f'<p id="reproduce">Reproduce: {_e(command)}</p>',
    ]
    if report.get("unmatched_expectations"):
        items = "".join(f"<li>{_e(u['pattern'])} ({_e(u['status'])})</li>"
                        for u in report["unmatched_expectations"])  # fmt: skip
        parts.append(f"<h2>Expectations that matched no case</h2><ul>{items}</ul>")
    for dev in report["devices"]:
        ds = dev["summary"]
        dverdict = "PASS" if not ds["failed"] else "FAIL"
        parts.append(f"<h2>{_e(dev['device'])}: {_e(dev['device_name'])} — {dverdict}</h2>")
        bad = [c for c in dev["cases"] if c["status"] in ("fail", "error")]
        if bad:
            parts.append("<h3>Failures</h3>" + _cases(bad))
        parts.append("<h3>Op x dtype</h3>" + _grid(dev["cases"]))
        parts.append(_dl([("dtypes", ", ".join(dev["device_dtypes"])),
                          *[(k, v) for k, v in dev["device_details"].items()],
                          ("wall time", f"{dev['wall_time_s']:.1f} s")]))  # fmt: skip
        model = [c for c in dev["cases"] if c["group"] == "model"]
        parts.append("<h3>Model check (tiny transformer, forward and backward)</h3>")
        parts.append(_cases(model) if model else "<p>Not run.</p>")
        parts.append("<h3>Every case, by op</h3>" + _by_op(dev["cases"]))
        parts.append("<h3>Throughput on this device</h3>" + _throughput(dev.get("throughput", [])))
    parts.append("<h2>Run</h2>" + about)
    parts.append("</body></html>")
    return "\n".join(parts)
