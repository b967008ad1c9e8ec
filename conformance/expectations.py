"""Expectations files: a backend author's list of known skips and expected failures.

JSON (always) or TOML (Python >= 3.11), one table of case-id patterns::

    {"cases": {
        "flash_attention_backward[float32]": {"status": "xfail", "reason": "issue #12"},
        "*[float64]": {"status": "skip", "reason": "no fp64 on this GPU"}
    }}

Patterns are globs over case ids (``softmax[float32]``, ``softmax[float32,composite]``,
``errors/add_shape_mismatch``, ``protocol/devices``) where only ``*`` and ``?`` are
wildcards: brackets are literal, because every numeric case id contains them.
Entries that match no case are reported, so a stale file does not rot silently.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATUSES = ("skip", "xfail")


class ExpectationsError(ValueError):
    """The expectations file is malformed; the message names the file and the entry."""


@dataclass
class Expectation:
    pattern: str
    status: str
    reason: str
    matched: int = 0


@dataclass
class Expectations:
    source: str = ""
    entries: list[Expectation] = field(default_factory=list)

    def lookup(self, case_id: str) -> Expectation | None:
        """The first entry whose pattern matches ``case_id`` (exact ids win over globs)."""
        exact = [e for e in self.entries if e.pattern == case_id]
        for e in exact or [e for e in self.entries if glob_match(case_id, e.pattern)]:
            e.matched += 1
            return e
        return None

    def unmatched(self) -> list[Expectation]:
        return [e for e in self.entries if e.matched == 0]


@functools.lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile("".join(parts) + r"\Z")


def glob_match(name: str, pattern: str) -> bool:
    """``*`` and ``?`` wildcards; everything else (brackets included) is literal."""
    return _glob_regex(pattern).match(name) is not None


def _parse(text: str, path: str) -> dict[str, Any]:
    if path.endswith(".toml"):
        if sys.version_info < (3, 11):
            raise ExpectationsError(f"{path}: TOML needs Python 3.11+ (tomllib); use JSON")
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ExpectationsError(f"{path}: invalid TOML: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExpectationsError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ExpectationsError(f"{path}: top level must be an object with a 'cases' table")
    return data


def load(path: str | os.PathLike[str]) -> Expectations:
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ExpectationsError(f"cannot read expectations file {path}: {exc}") from exc
    data = _parse(text, path)
    cases = data.get("cases", {})
    if not isinstance(cases, dict):
        raise ExpectationsError(f"{path}: 'cases' must be a table of case-id patterns")
    out = Expectations(path)
    for pattern, entry in cases.items():
        if not isinstance(entry, dict) or entry.get("status") not in STATUSES:
            raise ExpectationsError(
                f"{path}: entry {pattern!r} needs status 'skip' or 'xfail'; got {entry!r}"
            )
        reason = str(entry.get("reason", "")).strip()
        if not reason:
            raise ExpectationsError(f"{path}: entry {pattern!r} needs a non-empty reason")
        out.entries.append(Expectation(pattern, entry["status"], reason))
    return out


def for_backend(cls: type | None, explicit: str | None) -> Expectations:
    """``--expectations PATH`` wins; else the class attribute ``conformance_expectations``.

    A relative class attribute is resolved against the directory of the class's module,
    so a backend package can ship the file next to its code."""
    if explicit:
        return load(explicit)
    rel = getattr(cls, "conformance_expectations", None) if cls is not None else None
    if not rel:
        return Expectations()
    path = Path(rel)
    if not path.is_absolute():
        module = importlib.import_module(cls.__module__)
        path = Path(getattr(module, "__file__", ".")).parent / path
    return load(path)
