"""Checks that keep one broken plugin from taking riftco down.

Everything a plugin hands riftco is checked before use, and every call into plugin code
that ``riftco backends`` or ``auto`` needs (``is_available``, ``devices``, ``capabilities``)
runs in a daemon thread with a time limit. A plugin that raises, answers garbage, calls
``sys.exit()`` or never answers becomes one unavailable backend with a reason; the
registry decides what to do with that reason (list it, or raise in strict mode).
"""

from __future__ import annotations

import json
import math
import os
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backend import PROTOCOL_VERSION, Capabilities, DeviceInfo, missing_primitives
from .errors import RiftcoError
from .lazy_backend import LazyBackend

#: Seconds a probe may take. Generous because a probe may legitimately build something:
#: the native backend compiles its C kernels in its first ``is_available()`` (about 7 s on
#: an idle 2-core Xeon, several times that on a loaded one).
DEFAULT_PROBE_TIMEOUT = 30.0

#: Class-level methods and attributes of the Backend protocol that riftco itself uses.
IDENTITY_METHODS: tuple[str, ...] = ("is_available", "devices", "capabilities")
CLASS_ATTRIBUTES: tuple[str, ...] = ("dtypes", "accepts_strided")

#: Reserved device-string words a backend may not take as its name.
RESERVED_NAMES = frozenset({"auto"})


def one_line(text: str) -> str:
    """A reason fits one listing line (a SyntaxError or pluggy's message spans several)."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def short_exc(exc: BaseException) -> str:
    """``Type: message`` on one line, with a hint for ``sys.exit()``."""
    text = one_line("".join(traceback.format_exception_only(type(exc), exc)))
    if isinstance(exc, SystemExit):
        text += " (the plugin called sys.exit())"
    return text


def probe_timeout() -> float:
    """``RIFTCO_PROBE_TIMEOUT`` in seconds (a positive, finite number), else the default."""
    raw = os.environ.get("RIFTCO_PROBE_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_PROBE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise RiftcoError(
            f"[plugins] RIFTCO_PROBE_TIMEOUT={raw!r}; expected a positive number of seconds"
        )
    return value


@dataclass(frozen=True)
class Outcome:
    """What a bounded call produced: a value, or why there is none."""

    value: Any = None
    error: str = ""
    cause: BaseException | None = None


def call_bounded(fn: Callable[[], Any], what: str, timeout: float) -> Outcome:
    """Run ``fn`` in a daemon thread; give up after ``timeout`` seconds.

    A daemon thread, not an executor: a probe that never returns must not keep the
    process alive at exit (executor workers are joined at exit). The abandoned thread is
    left running; Python offers no safe way to stop it.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: report it, never vanish
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"riftco probe {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return Outcome(error=f"{what} timed out after {timeout:g} s (RIFTCO_PROBE_TIMEOUT)")
    if "error" in box:
        return Outcome(error=f"{what} raised {short_exc(box['error'])}", cause=box["error"])
    return Outcome(value=box["value"])


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


# -- what a plugin's hook returned -------------------------------------------------------------
def origin(cls: Any) -> str:
    """``package.module.ClassName`` of a backend class or a LazyBackend, without importing."""
    if isinstance(cls, LazyBackend):
        return cls.origin
    return f"{cls.__module__}.{cls.__qualname__}"


def check_hook_answer(answer: Any) -> str:
    """Why ``answer`` is not a list of backend classes (or LazyBackends) with usable,
    distinct names ('' if ok)."""
    if not isinstance(answer, (list, tuple)):
        return (
            f"hook riftco_backends returned {_describe(answer)}; "
            "expected a list of backend classes (return [] for none)"
        )
    seen: set[str] = set()
    for i, cls in enumerate(answer):
        if isinstance(cls, LazyBackend):
            problem = cls.problem()
            if problem:
                return problem
        elif not isinstance(cls, type):
            return (
                f"hook riftco_backends returned {_describe(cls)} at position {i}; "
                "expected a backend class or a riftco.LazyBackend"
            )
        try:
            name = getattr(cls, "name", None)
        except Exception as exc:
            return f"reading {cls.__qualname__}.name raised {short_exc(exc)}"
        if not isinstance(name, str) or not name:
            return f"returned {origin(cls)}, which has no string 'name'"
        if ":" in name or any(c.isspace() for c in name) or name in RESERVED_NAMES:
            return (
                f"returned a backend named {name!r}; a name may not contain ':' or spaces, "
                f"and {', '.join(sorted(RESERVED_NAMES))} is reserved"
            )
        if name in seen:
            return f"returned two backends named {name!r}"
        seen.add(name)
    return ""


def protocol_version_of(cls: type[Any]) -> tuple[tuple[int, int] | None, str]:
    """The class's ``(major, minor)`` and, when it does not fit riftco, why not."""
    raw: Any = getattr(cls, "protocol_version", None)
    ok = (
        isinstance(raw, (tuple, list))
        and len(raw) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in raw)
    )
    if not ok:
        return None, (
            f"backend {cls.name!r} has protocol_version = {_describe(raw)}; "
            "expected a (major, minor) tuple of ints"
        )
    version = (int(raw[0]), int(raw[1]))
    if version[0] != PROTOCOL_VERSION[0]:
        return version, (
            f"backend {cls.name!r} implements protocol {version[0]}.{version[1]} but riftco "
            f"speaks protocol {PROTOCOL_VERSION[0]}.{PROTOCOL_VERSION[1]} "
            "(major versions differ)"
        )
    return version, ""


def priority_of(cls: type[Any]) -> tuple[int, str]:
    raw = getattr(cls, "priority", None)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw, ""
    return 0, f"backend {cls.name!r} has priority = {_describe(raw)}; expected an int"


def protocol_problem(cls: type[Any]) -> str:
    """Why ``cls`` does not implement the Backend protocol ('' if it does).

    Structural, like the protocol itself: subclassing BackendBase is not required.
    """
    try:
        missing = [m for m in IDENTITY_METHODS if not callable(getattr(cls, m, None))]
        missing += missing_primitives(cls)
        absent = [a for a in CLASS_ATTRIBUTES if not hasattr(cls, a)]
    except Exception as exc:
        return f"inspecting backend {cls.name!r} raised {short_exc(exc)}"
    parts = []
    if missing:
        parts.append(f"lacks required methods: {', '.join(missing)}")
    if absent:
        parts.append(f"lacks class attributes: {', '.join(absent)}")
    return f"backend {cls.name!r} " + "; ".join(parts) if parts else ""


# -- what a probe returned ---------------------------------------------------------------------
def check_availability(value: Any) -> tuple[bool, str, str]:
    """``(available, reason, fault)`` from an ``is_available()`` answer."""
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], bool)
        and isinstance(value[1], (str, type(None)))
    ):
        return value[0], value[1] or "", ""
    fault = f"is_available() returned {_describe(value)}; expected (bool, str)"
    return False, fault, fault


def check_devices(value: Any) -> str:
    """Why a ``devices()`` answer is unusable ('' if it is a proper device list)."""
    if not isinstance(value, (list, tuple)):
        return f"devices() returned {_describe(value)}; expected a list of riftco.DeviceInfo"
    for i, dev in enumerate(value):
        if not isinstance(dev, DeviceInfo):
            return (
                f"devices() returned {_describe(dev)} at position {i}; expected riftco.DeviceInfo"
            )
        if dev.index != i:
            return f"devices() lists index {dev.index!r} at position {i}; expected {i}"
        if not isinstance(dev.name, str):
            return f"devices() entry {i} has name {_describe(dev.name)}; expected a str"
        if not isinstance(dev.dtypes, (tuple, list)) or not all(
            isinstance(d, str) for d in dev.dtypes
        ):
            return f"devices() entry {i} has dtypes {_describe(dev.dtypes)}; expected strs"
        if not isinstance(dev.details, dict) or not _is_json(dev.details):
            return (
                f"devices() entry {i} has details {_describe(dev.details)}; "
                "expected a JSON-serialisable dict"
            )
    return ""


def capabilities_dict(value: Any) -> tuple[dict[str, Any] | None, str]:
    """The listing form of a ``capabilities()`` answer, or why there is none."""
    if not isinstance(value, Capabilities):
        return None, f"capabilities() returned {_describe(value)}; expected riftco.Capabilities"
    try:
        caps = value.as_dict()
    except Exception as exc:
        return None, f"capabilities() returned values riftco cannot read: {short_exc(exc)}"
    if not _is_json(caps):
        return None, f"capabilities() returned values riftco cannot list: {_describe(caps)}"
    return caps, ""


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
