"""``riftco conformance BACKEND[:DEVICE]``: check a backend against the CPU float64 reference.

The run always finishes: a case that crashes is that case's error, and the table, the
JSON (``--json``) and the certificate (``--html``) are written at the end. While it runs,
the JSON file is rewritten after every few cases with ``"complete": false``, so even a
process killed by a crashing native kernel leaves a report that shows how far it got.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from riftco.dtypes import is_float

DEFAULT_MAX_EXAMPLES = 25  # mirrored in runner.py (importing it needs hypothesis)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="riftco conformance",
        description="Run every protocol op (forward and backward), the error contract, the "
        "domain checks and the composite fallbacks on a backend, against the CPU backend in "
        "float64, plus a tiny-transformer model check. Needs hypothesis "
        "(pip install 'riftco[conformance]').",
    )
    p.add_argument(
        "backend",
        help="backend name, optionally with a device index: opencl:1; "
        "with --compare, a JSON report in its place compares two reports without "
        "running anything",
    )
    p.add_argument(
        "--compare",
        metavar="OLD.json",
        help="list the regressions of this run (or of the report given in place of "
        "the backend) against an earlier JSON report; exit 1 if there are any",
    )
    p.add_argument("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES, metavar="N",
                   help="hypothesis-drawn examples per case, on top of the edge cases "
                   "(default %(default)s)")  # fmt: skip
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="draw examples from this seed instead of the derandomised default",
    )
    p.add_argument(
        "--ops",
        default="",
        metavar="PATTERNS",
        help="comma-separated op names or case-id globs, e.g. 'softmax*,matmul'",
    )
    p.add_argument(
        "--dtypes",
        default="",
        metavar="LIST",
        help="check only these float dtypes, e.g. 'float32' (default: every one the device "
        "has); the other dtypes still serve the mixed-dtype error checks",
    )
    p.add_argument("--json", metavar="PATH", help="write the JSON report here")
    p.add_argument(
        "--html",
        metavar="PATH",
        help="write a self-contained HTML certificate here (no network, no scripts)",
    )
    p.add_argument(
        "--throughput",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="measure per-op GB/s and GFLOP/s (default: on with --html)",
    )
    p.add_argument(
        "--expectations",
        metavar="PATH",
        help="expectations file (JSON or TOML); default: the backend's own, if any",
    )
    p.add_argument("--strict", action="store_true", help="an xfail case that passes is a failure")
    p.add_argument("--quiet", "-q", action="store_true", help="print only failures and the summary")
    return p  # fmt: skip


def _missing_hypothesis() -> str | None:
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        return (
            "riftco conformance needs hypothesis, which is not installed; "
            "install it with: pip install 'riftco[conformance]'"
        )
    return None


def _write(path: str, text: str, flag: str) -> None:
    """Atomically, through a link, never over a special file, no temporary left behind
    (``riftco.output_files``): a reader (or a crash) never sees half a report."""
    from riftco.output_files import write_file

    write_file(path, text, f"conformance {flag}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.compare and args.backend.endswith(".json"):
        return _compare(args.compare, args.backend)
    problem = _missing_hypothesis()
    if problem:
        print(f"riftco conformance: {problem}", file=sys.stderr)
        return 2
    from riftco.errors import RiftcoError
    from riftco.ops.samples import Ctx
    from riftco.output_files import check_file

    from . import throughput as tp
    from .expectations import ExpectationsError, for_backend
    from .html import render
    from .provenance import command
    from .report import explain, header, json_report, print_failures, row, summary_line
    from .results import CaseResult
    from .runner import RunSettings
    from .suite import Target, resolve, run_target

    out = sys.stdout
    try:  # every output path first: a run must not end by failing to write its report
        for flag, path in (("--json", args.json), ("--html", args.html)):
            if path:
                check_file(path, f"conformance {flag}")
        targets = resolve(args.backend)
        expectations = for_backend(targets[0].entry.cls, args.expectations)
    except (RiftcoError, ExpectationsError) as exc:
        print(f"riftco conformance: {exc}", file=sys.stderr)
        return 2
    run = RunSettings(max_examples=args.max_examples, seed=args.seed)
    patterns = [p.strip() for p in args.ops.split(",") if p.strip()]
    only = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    measure = args.throughput if args.throughput is not None else bool(args.html)
    settings: dict[str, Any] = {
        "max_examples": run.max_examples, "seed": run.seed, "derandomized": run.seed is None,
        "ops": patterns, "dtypes": only, "strict": args.strict, "expectations": expectations.source,
        "throughput": measure,
    }  # fmt: skip
    rerun = command(args.backend, argv)
    done: list[tuple[Target, list[CaseResult], float]] = []
    speeds: dict[str, list[dict[str, Any]]] = {}

    def report(complete: bool) -> dict[str, Any]:
        unmatched = [{"pattern": e.pattern, "status": e.status, "reason": e.reason}
                     for e in expectations.unmatched()] if complete else []  # fmt: skip
        return json_report(done, settings, unmatched, args.strict, speeds, complete, rerun)

    entry = targets[0].entry
    pv = ".".join(map(str, entry.protocol_version or ())) or "?"
    print(
        f"riftco conformance: backend {entry.name} "
        f"({f'{entry.distribution} {entry.dist_version}'.strip()}, "
        f"protocol {pv}) vs cpu float64; {len(targets)} device(s)",
        file=out,
    )
    if expectations.source:
        print(f"expectations: {expectations.source}", file=out)
    last_write = 0.0
    for target in targets:
        target.ops = patterns
        device = target.entry.devices()[target.index]
        float_names = [d for d in device.dtypes if is_float(_dtype(d))]
        unknown = [d for d in only if d not in float_names]
        if unknown:
            print(
                f"riftco conformance: --dtypes {','.join(unknown)}: {target.label} has float "
                f"dtypes {', '.join(float_names)}",
                file=sys.stderr,
            )
            return 2
        target.only = tuple(np.dtype(d) for d in only)
        print(f"\n== {target.label}  {device.name}  dtypes: {', '.join(device.dtypes)}", file=out)
        if not args.quiet:
            print(header(), file=out)
        results: list[CaseResult] = []
        done.append((target, results, 0.0))
        start = time.perf_counter()
        try:
            for res in run_target(target, run, expectations):
                results.append(res)
                if not args.quiet:
                    print(row(res), file=out)
                    if res.status != "pass":
                        print(explain(res), file=out)
                    out.flush()
                if args.json and time.perf_counter() - last_write > 1.0:
                    done[-1] = (target, results, time.perf_counter() - start)
                    _write(args.json, _dumps(report(complete=False)), "--json")
                    last_write = time.perf_counter()
        except RiftcoError as exc:  # planning failed (backend could not start): no cases
            print(f"riftco conformance: {exc}", file=sys.stderr)
            return 2
        if measure and target.backend is not None:
            floats = target.float_dtypes()
            main = np.dtype(np.float32) if np.dtype(np.float32) in floats else floats[0]
            ctx = Ctx(main, floats, target.index_dtypes())
            rows = tp.measure(target.backend, ctx, lambda op, t=target: t.wanted(op, op))
            speeds[target.label] = [r.as_dict() for r in rows]
            if not args.quiet:
                print("\nthroughput (indicative; bench/ has the careful numbers)", file=out)
                print(tp.table(rows), file=out)
        wall = time.perf_counter() - start
        done[-1] = (target, results, wall)
        if args.quiet:
            print_failures(results, out, args.strict)
        print("\n" + summary_line(target.label, results, args.strict, wall), file=out)
    final = report(complete=True)
    for e in final["unmatched_expectations"]:
        print(f"expectations: entry {e['pattern']!r} ({e['status']}) matched no case", file=out)
    try:
        if args.json:
            _write(args.json, _dumps(final), "--json")
            print(f"JSON report: {args.json}", file=out)
        if args.html:
            _write(args.html, render(final), "--html")
            print(f"HTML certificate: {args.html}", file=out)
    except RiftcoError as exc:  # e.g. the disk filled up since the paths were checked
        print(f"riftco conformance: {exc}", file=sys.stderr)
        return 2
    regressed = _compare(args.compare, final) if args.compare else 0
    return regressed or (0 if final["passed"] else 1)


def _compare(old_path: str, new: dict[str, Any] | str) -> int:
    """Print the regressions of ``new`` (a report, or a report's path) against ``old_path``:
    0 none, 1 some, 2 a report could not be read."""
    from .compare import compare, format_comparison, load

    try:
        diff = compare(load(old_path), load(new) if isinstance(new, str) else new)
    except ValueError as exc:
        print(f"riftco conformance: {exc}", file=sys.stderr)
        return 2
    print("\n" + format_comparison(diff, old_path))
    return 1 if diff.regressions else 0


def _dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, allow_nan=False, default=str)


if __name__ == "__main__":
    raise SystemExit(main())


def _dtype(name: str) -> np.dtype | None:
    try:
        return np.dtype(name)
    except TypeError:  # bfloat16 without ml_dtypes
        return None
