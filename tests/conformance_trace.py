"""Which conformance cases reach which backend methods: what lets a mutant's whole-suite
run skip the cases its bug cannot touch.

A mutant is the CPU reference with a few attributes replaced. A case that never calls a
replaced method runs exactly the reference's code on exactly the reference's draws
(derandomised hypothesis, per-case seeds), so it passes on the mutant as it passes on the
reference: running it proves nothing. :func:`trace_cases` runs the suite once on an intact
reference whose every method notes the case it is called in; :func:`cases_reaching` then
names the cases a mutant must run. Anything it cannot account for (a replaced class
attribute such as ``accepts_strided``, a private helper, a replaced method called between
cases) makes it answer ``None``: run everything.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conformance_mutants import Base
from helpers import plugin_for
from riftco.conformance import cli, suite

#: Attributes every class has, which say nothing about behaviour.
_CLASS_NOISE = frozenset(
    {"__module__", "__doc__", "__qualname__", "__dict__", "__weakref__", "__annotations__",
     "__firstlineno__", "__static_attributes__", "__init_subclass__", "name"}
)  # fmt: skip
#: Calls made outside any case (planning, instance creation) are noted under this key.
OUTSIDE = "<between cases>"


def traced_methods() -> list[str]:
    """Base's plain methods (protocol and helpers), the names a trace can see."""
    return [
        n for n in dir(Base)
        if n not in _CLASS_NOISE and inspect.isfunction(inspect.getattr_static(Base, n))
    ]  # fmt: skip


def trace_cases(
    registry: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *argv: str
) -> dict[str, set[str]]:
    """Run the suite (``argv``: its settings) on an intact ``Base``; case id -> methods."""
    seen: dict[str, set[str]] = defaultdict(set)
    current = [OUTSIDE]

    def noting(name: str, method: Any) -> Any:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            seen[current[0]].add(name)
            return method(self, *args, **kwargs)

        return wrapper

    body = {n: noting(n, getattr(Base, n)) for n in traced_methods()}
    tracer = type("Base", (Base,), {**body, "name": "mutant"})
    run_safely = suite._run_safely

    def in_case(planned: Any) -> Any:
        current[0] = planned.case_id
        try:
            return run_safely(planned)
        finally:
            current[0] = OUTSIDE

    registry.register(plugin_for(tracer), name="mutant-trace")
    out = tmp_path / "trace.json"
    with monkeypatch.context() as patch:
        patch.setattr(suite, "_run_safely", in_case)
        rc = cli.main(["mutant", *argv, "--json", str(out), "--quiet"])
    registry.unregister("mutant")  # the name is the mutants' next
    report = json.loads(out.read_text())
    assert rc == 0, "the intact reference must pass the suite it traces"
    assert report["complete"] and len(seen) > 100, "the trace saw too few cases"
    return dict(seen)  # a case that calls no method (an argument error) is not in it


def replaced(cls: type[Base]) -> set[str]:
    """The attributes ``cls`` defines over ``Base``."""
    names: set[str] = set()
    for klass in cls.__mro__[: cls.__mro__.index(Base)]:
        names |= set(vars(klass)) - _CLASS_NOISE
    return names


def cases_reaching(trace: dict[str, set[str]], cls: type[Base]) -> list[str] | None:
    """The case ids whose calls reach a method ``cls`` replaces (sorted), or ``None`` when
    the trace cannot vouch for the rest and the whole suite must run."""
    names = replaced(cls)
    if not names <= set(traced_methods()) or names & trace.get(OUTSIDE, set()):
        return None
    return sorted(cid for cid, called in trace.items() if cid != OUTSIDE and called & names)


def ops_argument(case_ids: list[str]) -> str:
    """``--ops`` for these ids. The list is comma-separated and ids hold commas
    (``linear_gelu[float32,composite]``), so each comma becomes ``?`` (any one character).
    The suite plans a unit's composite capture case under its plain id, so that id is
    named instead (a superset: never fewer cases than asked; the composite capture id
    itself would be a pattern no planned case answers to, which --ops refuses)."""
    assert case_ids, "a mutant reaches at least its own op's cases"
    ids = set(case_ids) | {c.replace(",composite]", "]") for c in case_ids}
    ids = {c for c in ids if not (c.startswith("capture/") and c.endswith(",composite]"))}
    return ",".join(sorted(c.replace(",", "?") for c in ids))
