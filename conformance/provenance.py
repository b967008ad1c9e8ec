"""What a certificate says about where it came from, in a form safe to publish.

A certificate is meant to be attached to an issue or put on a web page: it must name what
was tested (the backend's coverage, its libraries' versions, the machine) and how to
rerun it, and must not leak the path of the person's home or checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

#: A requirement's distribution name (PEP 508: the name comes first).
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def library_versions(distribution: str, cls: type | None) -> dict[str, str]:
    """``{distribution: version}`` for what the backend runs on.

    The backend's own distribution's unconditional requirements (a torch backend that
    requires ``torch`` reports torch's version), plus the distributions named in the
    optional class attribute ``libraries`` (for a backend whose library is an extra, such
    as riftco's own OpenCL backend and ``pyopencl``). A required distribution that is not
    installed reads "not installed"; a platform-conditional one is left out.
    """
    names: dict[str, bool] = {}  # name -> required here (a marker-less requirement)
    try:
        for req in metadata.requires(distribution) or []:
            match, marker = _NAME.match(req), req.partition(";")[2]
            if match and "extra" not in marker:
                names[match.group(1)] = not marker.strip()
    except metadata.PackageNotFoundError:
        pass
    names.update((str(n), True) for n in getattr(cls, "libraries", ()) or ())
    out: dict[str, str] = {}
    for name, required in names.items():
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if required:  # a platform-conditional one that is absent does not apply here
                out[name] = "not installed"
    return out


def coverage(cls: type | None, checked: list[str]) -> dict[str, Any]:
    """Which optional ops are native, which dtypes were checked, whether strided input is
    accepted: the first thing a reader of the certificate wants to know."""
    from riftco.backend import FUSED_OPS, PRIMITIVE_OPS

    caps = cls.capabilities() if cls is not None else None  # type: ignore[attr-defined]
    native = sorted(caps.fused) if caps is not None else []
    return {
        "primitives": len(PRIMITIVE_OPS),
        "optional_native": [op for op in FUSED_OPS if op in native],
        "optional_missing": [op for op in FUSED_OPS if op not in native],
        "dtypes": sorted(d.name for d in caps.dtypes) if caps is not None else [],
        "dtypes_checked": list(checked),
        "accepts_strided": bool(caps.accepts_strided) if caps is not None else False,
    }


def command(spec: str, argv: list[str]) -> str:
    """The command line that reruns this check: the options that choose cases, without the
    output paths' folders (the file names stay, so the rerun writes the same files)."""
    out = ["riftco", "conformance", spec]
    path_options = ("--json", "--html", "--expectations")
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in path_options:
            if not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            out += [name, Path(value).name if name != "--expectations" else _portable(value)]
        elif arg != spec:
            out.append(arg)
        i += 1
    return shlex.join(out)


def _prefixes() -> list[str]:
    """Absolute folders whose names say nothing to a reader: the checkout, site-packages,
    the virtual environment. Longest first, so the most specific one is cut."""
    found = {os.getcwd(), sys.prefix, *(p for p in sys.path if p and os.path.isabs(p))}
    return sorted((p.rstrip(os.sep) for p in found if len(p) > 1), key=len, reverse=True)


def _portable(path: str) -> str:
    """``path`` relative to the checkout or site-packages it lies in, else its file name."""
    if not os.path.isabs(path):
        return path
    for prefix in _prefixes():
        if path.startswith(prefix + os.sep):
            return path[len(prefix) + 1 :]
    home = str(Path.home())
    if len(home) > 1 and path.startswith(home + os.sep):
        return "~" + path[len(home) :]
    return Path(path).name


#: An absolute path of two or more parts (``/a/b``; a lone ``/x`` is more likely a ratio).
_ABSOLUTE = re.compile(r"(?<![\w.~)\]])/(?:[^\s/:;,'\"()]+/)+[^\s/:;,'\"()]+")


def scrub(obj: Any) -> Any:
    """Every absolute path in ``obj``'s strings made portable (see :func:`_portable`)."""
    if isinstance(obj, str):
        return _ABSOLUTE.sub(lambda m: _portable(m.group(0)), obj) if "/" in obj else obj
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v) for v in obj]
    return obj
