"""The conformance certificate: one self-contained HTML page per run.

Made from the JSON report alone (so the two always agree), with inline CSS and no script
or external resource: it opens offline, attaches to an issue, and prints. The verdict comes
first, then what was tested where (backend, versions, device, machine, settings), then every
case (op x dtype, native or composite, max error against tolerance, failing example), the
model check and the per-op throughput.
"""

from __future__ import annotations

import html
from typing import Any

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1200px;
color:#1d1d1f;padding:0 1em}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
.verdict{display:inline-block;padding:.35em .9em;border-radius:6px;font-weight:700;font-size:1.3em;
color:#fff}.pass{background:#1a7f37}.fail{background:#cf222e}.incomplete{background:#9a6700}
table{border-collapse:collapse;width:100%;margin:.6em 0}th,td{padding:.25em .5em;text-align:left;
border-bottom:1px solid #eee;vertical-align:top}th{background:#f6f8fa;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.bad td{background:#ffebe9}
tr.skip td{color:#777}.status{font-weight:600}.s-pass{color:#1a7f37}.s-fail,.s-error{color:#cf222e}
.s-skip,.s-xfail{color:#9a6700}.detail{font-family:ui-monospace,monospace;font-size:12px;
white-space:pre-wrap;color:#57606a}dl{display:grid;grid-template-columns:max-content auto;
gap:.2em 1em}dt{color:#57606a}dd{margin:0}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: Any) -> str:
    return "-" if x is None or isinstance(x, str) else f"{x:.2e}"


def _tol(t: Any) -> str:
    if not t:
        return "-"
    scale = t.get("atol_scale")
    extra = f" ×{scale:.3g}" if isinstance(scale, (int, float)) and scale not in (0, 1) else ""
    return f"atol {t['atol']:.0e}{extra}, rtol {t['rtol']:.0e}"


def _dl(items: list[tuple[str, Any]]) -> str:
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items) + "</dl>"


def _cases(cases: list[dict[str, Any]]) -> str:
    head = ("case", "op", "dtype", "mode", "max abs err", "max rel err", "tolerance", "examples",
            "result", "time")  # fmt: skip
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
            f'<tr class="{cls}"><td>{_e(c["id"])}{detail}</td><td>{_e(c["op"])}</td>'
            f"<td>{_e(c['dtype'])}</td><td>{_e(c['mode'])}</td>"
            f'<td class="num">{_num(c.get("max_abs_err"))}</td>'
            f'<td class="num">{_num(c.get("max_rel_err"))}</td>'
            f"<td>{_e(_tol(c.get('tolerance')))}</td>"
            f'<td class="num">{_e(c.get("examples", 0))}</td>'
            f'<td class="status s-{_e(status)}">{_e(status.upper())}</td>'
            f'<td class="num">{c.get("time_s", 0):.2f}s</td></tr>'
        )
    return _table(head, rows)


def _table(head: tuple[str, ...], rows: list[str]) -> str:
    return "<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + \
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"  # fmt: skip


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
        ("backend", report["backend"]),
        ("distribution", f"{report['distribution']} {report['distribution_version']}"),
        ("backend protocol", ".".join(map(str, report["protocol_version"]))),
        ("riftco", f"{report['riftco_version']} (protocol "
                   f"{'.'.join(map(str, report['riftco_protocol_version']))})"),
        ("reference", report["reference"]),
        ("date", report.get("date", "")),
        *[(k, v) for k, v in report.get("machine", {}).items()],
        ("settings", ", ".join(f"{k}={v}" for k, v in report["settings"].items())),
    ])  # fmt: skip
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>riftco conformance certificate: {_e(report['backend'])}</h1>",
        f'<p><span class="verdict {cls}" id="verdict">{verdict}</span> '
        f"{_e(s['total'])} cases: {_e(counts)}</p>",
        about,
    ]
    if report.get("unmatched_expectations"):
        items = "".join(f"<li>{_e(u['pattern'])} ({_e(u['status'])})</li>"
                        for u in report["unmatched_expectations"])  # fmt: skip
        parts.append(f"<h2>Expectations that matched no case</h2><ul>{items}</ul>")
    for dev in report["devices"]:
        ds = dev["summary"]
        dverdict = "PASS" if not ds["failed"] else "FAIL"
        parts.append(f"<h2>{_e(dev['device'])}: {_e(dev['device_name'])} — {dverdict}</h2>")
        parts.append(_dl([("dtypes", ", ".join(dev["device_dtypes"])),
                          *[(k, v) for k, v in dev["device_details"].items()],
                          ("wall time", f"{dev['wall_time_s']:.1f} s")]))  # fmt: skip
        bad = [c for c in dev["cases"] if c["status"] in ("fail", "error")]
        if bad:
            parts.append("<h3>Failures</h3>" + _cases(bad))
        model = [c for c in dev["cases"] if c["group"] == "model"]
        parts.append("<h3>Model check (tiny transformer, forward and backward)</h3>")
        parts.append(_cases(model) if model else "<p>Not run.</p>")
        parts.append("<h3>Every case</h3>" + _cases(dev["cases"]))
        parts.append("<h3>Throughput on this device</h3>" + _throughput(dev.get("throughput", [])))
    parts.append("</body></html>")
    return "\n".join(parts)
