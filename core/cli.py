"""The ``riftco`` command: backends, conformance, train, sample.

Subcommands import their modules lazily so ``riftco backends`` stays fast and works even
when an optional part (a GPU runtime, the trainer's extras) is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from .startup import in_command


def _backends(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="riftco backends", description="List registered backends."
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also list each device's cached kernel programs with their build logs",
    )
    args = parser.parse_args(argv)
    from .errors import RiftcoError
    from .plugins import get_registry

    try:  # strict mode (RIFTCO_STRICT_PLUGINS=1) turns a broken plugin into an error here
        registry = get_registry()
        entries = sorted(registry.entries.values(), key=lambda e: (-e.priority, e.name))
        rows = [e.as_dict() for e in entries]
    except RiftcoError as exc:
        print(f"riftco backends: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"backends": rows, "failed_plugins": registry.failed_plugins}, indent=2))
        return 0
    for row in rows:
        status = "available" if row["available"] else f"unavailable: {row['reason']}"
        pv = row["protocol_version"]
        proto = f"{pv[0]}.{pv[1]}" if pv else "?"
        print(f"{row['name']}  [{status}]")
        print(
            f"  distribution {row['distribution']} {row['version']}, protocol {proto}, "
            f"priority {row['priority']}"
        )
        for d in row["devices"]:
            print(
                f"  device {row['name']}:{d['index']}  {d['name']}  "
                f"dtypes: {', '.join(d['dtypes'])}"
            )
            details = _details_line(d)
            if details:
                print(f"    details: {details}")
            if args.verbose and d.get("kernel_cache"):
                _print_build_logs(str(d["kernel_cache"]))
        caps = row["capabilities"]
        if caps:
            native = [op for op, how in caps["fused"].items() if how == "native"]
            composite = [op for op, how in caps["fused"].items() if how == "composite"]
            print(
                f"  dtypes: {', '.join(caps['dtypes'])}; strided input: {caps['accepts_strided']}"
            )
            print(f"  fused native: {', '.join(native) or '-'}")
            print(f"  fused composite: {', '.join(composite) or '-'}")
            half = [d for d in caps["dtypes"] if d in ("float16", "bfloat16")]
            if half:
                own = ", ".join(caps.get("low_precision_ops", ())) or "none"
                print(
                    f"  {', '.join(half)}: run in half storage: {own}; every other op in "
                    "float32 on this device, rounded once"
                )
    for plugin, reason in registry.failed_plugins.items():
        shown = plugin in registry.entries and registry.entries[plugin].is_placeholder
        if not shown:  # e.g. it lost a name clash: its name belongs to another backend
            print(f"plugin {plugin}  [failed: {reason}]")
    return 0


#: Longest value ``riftco backends`` prints in a ``details:`` line (``--json`` has all).
_DETAIL_WIDTH = 60


def _details_line(device: dict[str, Any]) -> str:
    """``key=value`` pairs of a device row beyond index, name and dtypes, sorted by key.

    The PoCL and LLVM versions and the target CPU live here, and they are what a bug
    report about an OpenCL device needs, so the text listing shows them too; long values
    are cut (``--json`` keeps them whole) and ones with spaces or commas are quoted."""
    parts = []
    for key in sorted(k for k in device if k not in ("index", "name", "dtypes", "kernel_cache")):
        value = device[key]
        text = json.dumps(value) if not isinstance(value, str) else value
        if len(text) > _DETAIL_WIDTH:
            text = text[: _DETAIL_WIDTH - 3] + "..."
        if isinstance(value, str) and (not text or any(c in text for c in " ,=\t")):
            text = json.dumps(text)
        parts.append(f"{key}={text}")
    return ", ".join(parts)


#: Longest compiler line ``riftco backends --verbose`` prints.
_LOG_WIDTH = 160


def _new_backend(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="riftco new-backend",
        description="Write an installable backend package: the entry point, a lazy plugin, a "
        "backend class whose every required method raises NotImplementedError until you "
        "write it, and a tests/ folder running the conformance suite through pytest.",
    )
    parser.add_argument("name", help="backend name: lower-case letters, digits, underscores")
    parser.add_argument("dir", nargs="?", help="where to write it (default: ./riftco-NAME)")
    args = parser.parse_args(argv)
    from .errors import RiftcoError
    from .new_backend import write

    try:
        root = write(args.name, args.dir)
    except (RiftcoError, OSError) as exc:
        print(f"riftco new-backend: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {root}/: pyproject.toml, riftco_{args.name}/, tests/, README.md")
    print(f"next: pip install -e '{root}[test]' && riftco conformance {args.name}")
    return 0


def _print_build_logs(folder: str) -> None:
    """The programs compiled for a device (its kernel cache) and what the compiler said:
    notable lines with ``!``, known-harmless ones with ``~`` and the reason."""
    from .kernel_host.build_log import BuildLog
    from .kernel_host.cache import entries_in

    entries = entries_in(folder)
    print(f"    kernel cache: {folder} ({len(entries)} programs)")
    for entry in entries:
        log = BuildLog.parse(entry.log, entry.program)
        print(f"      {entry.program}: {log.summary()}")
        for diag in log.diagnostics:
            mark, why = ("~", f"  [harmless: {diag.harmless}]") if diag.harmless else ("!", "")
            text = diag.text if len(diag.text) <= _LOG_WIDTH else diag.text[:_LOG_WIDTH] + "..."
            print(f"        {mark} {text}{why}")


def _ops(rest: list[str]) -> int:
    """``riftco ops [--markdown]``: the op table; ``--where NAME [--json]``: one op's files."""
    if "--where" in rest:
        from .op_locations import main as where_main

        i = rest.index("--where")
        if i + 1 >= len(rest) or rest[i + 1].startswith("-"):
            print("riftco ops: --where needs an op name (riftco ops lists them)", file=sys.stderr)
            return 2
        return where_main(rest[i + 1], "--json" in rest)
    from .ops.table import markdown, text

    if "--markdown" in rest:  # the docs table: repository paths
        print(markdown())
        return 0
    import inspect

    from .code_index import rel, root, root_kind

    print(f"root: {root()}  [{root_kind()}; paths below are relative to it]")
    print(text(lambda u: rel(inspect.getsourcefile(u.method) or "")))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {
        "backends": ("list backends, devices and capabilities", _backends),
        "ops": ("list every op; --where NAME: every file of one op", None),
        "conformance": ("check a backend against the CPU reference", None),
        "train": ("train the tiny transformer", None),
        "sample": ("sample text from a checkpoint", None),
        "new-backend": ("write a backend package to start from: new-backend NAME [DIR]", None),
    }
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print("usage: riftco {" + ",".join(commands) + "} ...\n")
        for name, (help_, _) in commands.items():
            print(f"  {name:12s} {help_}")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nriftco: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    try:
        code = _run(argv[0], argv[1:])
    except KeyboardInterrupt:  # a command that handles it itself (train) never gets here
        print(f"riftco {argv[0]}: interrupted", file=sys.stderr)
        code = 130
    if code == 130 and in_command():
        # Interrupted: leave now. Normal interpreter shutdown would run driver destructors
        # (PoCL's) while a probe's daemon thread is still inside the driver: SIGABRT.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(cmd: str, rest: list[str]) -> int:
    if cmd == "backends":
        return _backends(rest)
    if cmd == "ops":
        return _ops(rest)
    if cmd == "conformance":
        from riftco.conformance.cli import main as conformance_main

        return conformance_main(rest)
    if cmd == "new-backend":
        return _new_backend(rest)
    if cmd == "train":
        from .train.cli import train_main

        return train_main(rest)
    from .train.cli import sample_main

    return sample_main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
