"""``riftco conformance BACKEND[:DEVICE]``: check a backend against the CPU float64 reference."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from riftco.errors import RiftcoError

from .expectations import ExpectationsError, for_backend
from .report import explain, header, json_report, print_failures, row, summary_line
from .results import CaseResult
from .runner import DEFAULT_MAX_EXAMPLES, RunSettings
from .suite import Target, resolve, run_target


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="riftco conformance",
        description="Run every protocol op (forward and backward), the error contract and "
        "the composite fallbacks on a backend, against the CPU backend in float64.",
    )
    p.add_argument("backend", help="backend name, optionally with a device index: opencl:1")
    p.add_argument(
        "--max-examples",
        type=int,
        default=DEFAULT_MAX_EXAMPLES,
        metavar="N",
        help="hypothesis-drawn examples per case, on top of the edge cases (default %(default)s)",
    )
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
    p.add_argument("--json", metavar="PATH", help="write the JSON report here")
    p.add_argument(
        "--expectations",
        metavar="PATH",
        help="expectations file (JSON or TOML); default: the backend's own, if any",
    )
    p.add_argument("--strict", action="store_true", help="an xfail case that passes is a failure")
    p.add_argument("--quiet", "-q", action="store_true", help="print only failures and the summary")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    out = sys.stdout
    try:
        targets = resolve(args.backend)
        expectations = for_backend(targets[0].entry.cls, args.expectations)
    except (RiftcoError, ExpectationsError) as exc:
        print(f"riftco conformance: {exc}", file=sys.stderr)
        return 2
    run = RunSettings(max_examples=args.max_examples, seed=args.seed)
    patterns = [p.strip() for p in args.ops.split(",") if p.strip()]
    done: list[tuple[Target, list[CaseResult], float]] = []
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
    for target in targets:
        target.ops = patterns
        device = target.entry.devices()[target.index]
        print(f"\n== {target.label}  {device.name}  dtypes: {', '.join(device.dtypes)}", file=out)
        if not args.quiet:
            print(header(), file=out)
        results: list[CaseResult] = []
        start = time.perf_counter()
        try:
            for res in run_target(target, run, expectations):
                results.append(res)
                if not args.quiet:
                    print(row(res), file=out)
                    if res.status != "pass":
                        print(explain(res), file=out)
                    out.flush()
        except RiftcoError as exc:
            print(f"riftco conformance: {exc}", file=sys.stderr)
            return 2
        wall = time.perf_counter() - start
        done.append((target, results, wall))
        if args.quiet:
            print_failures(results, out, args.strict)
        print("\n" + summary_line(target.label, results, args.strict, wall), file=out)
    unmatched = [
        {"pattern": e.pattern, "status": e.status, "reason": e.reason}
        for e in expectations.unmatched()
    ]
    for e in unmatched:
        print(f"expectations: entry {e['pattern']!r} ({e['status']}) matched no case", file=out)
    settings: dict[str, Any] = {
        "max_examples": run.max_examples,
        "seed": run.seed,
        "derandomized": run.seed is None,
        "ops": patterns,
        "strict": args.strict,
        "expectations": expectations.source,
    }
    report = json_report(done, settings, unmatched, args.strict)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, allow_nan=False, default=_jsonable)
        print(f"JSON report: {args.json}", file=out)
    return 0 if report["passed"] else 1


def _jsonable(x: Any) -> Any:
    return str(x)


if __name__ == "__main__":
    raise SystemExit(main())
