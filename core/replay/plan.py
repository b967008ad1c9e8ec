"""A recorded step, and its replay: the backend calls, host work and gradient publications
of one run of the step, in order, over a table of storage slots.

Every tensor the step touched is a *slot*: one per storage. A slot is filled on replay by
the call (or host function) that produced it in the recording, by the captured function's
argument it came from, by the parameter (a Variable whose gradient the step published) it
is the value of, or, for a tensor the step only read, by that same tensor (*pinned*, as
TinyJit keeps buffers). Arguments are templates over the slots, so a view the step made
of an intermediate is made again of the replay's intermediate; numbers the step gets as
arguments, or from host functions, are refilled. Nothing else of the step's Python runs:
no graph, no op-level checks, no result-contract checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import numpy as np

from ..autograd import Variable
from ..errors import CaptureError
from ..ops.capture_hooks import generation
from ..tensor import Tensor

# Template kinds: a slot (optionally viewed), a constant, a refilled number, a sequence.
T, C, D, S = 0, 1, 2, 3
CALL, HOST, GRAD = 0, 1, 2

#: (shape, strides, offset, dtype): where a view sits in its storage.
Layout = tuple[tuple[int, ...], tuple[int, ...], int, np.dtype]


def layout(t: Tensor) -> Layout:
    return (t.shape, t.strides, t.offset, t.dtype)


class Stale(Exception):
    """A source no longer matches the recording (a parameter replaced by one of another
    layout, a pinned tensor written in place): the step must be recorded again."""


def resolve(tpl: tuple[Any, ...], slots: list[Any], dyn: list[Any]) -> Any:
    kind = tpl[0]
    if kind == T:
        base = slots[tpl[1]]
        lay = tpl[2]
        if lay is None:
            return base
        return Tensor(base.backend, base.storage, *lay)
    if kind == C:
        return tpl[1]
    if kind == D:
        return dyn[tpl[1]]
    return tpl[1]([resolve(x, slots, dyn) for x in tpl[2]])


def bind(spec: Any, out: Any, slots: list[Any]) -> None:
    """Put a call's outputs in the slots the recording gave them."""
    if spec is None:
        return
    if spec[0] == T:
        slots[spec[1]] = out
        return
    for s, o in zip(spec[1], out, strict=True):
        bind(s, o, slots)


def bind_host(spec: Any, out: Any, slots: list[Any], dyn: list[Any], what: str) -> None:
    """Put what a host function returned on replay where the recording expects it, after
    checking it has the recorded structure (a host function's result decides which
    tensors the following calls touch)."""
    kind = spec[0]
    if kind == T:
        _, slot, lay, base_lay, backend = spec
        if type(out) is not Tensor or layout(out) != lay or out.backend is not backend:
            raise CaptureError(
                f"[capture] {what} returned {_show(out)} on replay where the recording got a "
                f"tensor {lay[0]} {lay[3]} on {backend.name}: the step's host state changed "
                "shape; make a new riftco.capture for the new setup"
            )
        slots[slot] = out if lay == base_lay else Tensor(out.backend, out.storage, *base_lay)
    elif kind == D:
        if type(out) is not spec[2] and not (spec[2] is float and type(out) is int):
            raise CaptureError(
                f"[capture] {what} returned {out!r} on replay where the recording got a "
                f"{spec[2].__name__}"
            )
        dyn[spec[1]] = out
    elif kind == S:
        if type(out) not in (list, tuple) or len(out) != len(spec[1]):
            raise CaptureError(
                f"[capture] {what} returned {_show(out)} on replay where the recording got "
                f"{len(spec[1])} items: the step's host state changed shape; make a new "
                "riftco.capture for the new setup"
            )
        for s, o in zip(spec[1], out, strict=True):
            bind_host(s, o, slots, dyn, what)
    elif out != spec[1]:
        raise CaptureError(f"[capture] {what} returned {out!r} on replay, {spec[1]!r} recorded")


def _where(backend: Any) -> str:
    return f"{backend.name}:{backend.device_index}"


def _show(x: Any) -> str:
    if type(x) is Tensor:
        return f"a tensor {x.shape} {x.dtype} on {x.backend.name}"
    return f"{type(x).__name__} {x!r}"[:80]


@dataclass
class Plan:
    """One recording of a step, ready to replay."""

    entries: list[tuple[Any, ...]]
    n_slots: int
    n_dyn: int
    arg_slots: list[tuple[int, int, Layout]]  # (slot, argument position, base layout)
    arg_dyn: list[tuple[int, int]]  # (dyn index, argument position)
    var_slots: list[tuple[int, Variable, Layout, Layout]]  # (slot, var, its layout, base's)
    pinned: list[tuple[int, Tensor, int]]  # (slot, tensor, its version)
    deltas: list[tuple[int, int]]  # (slot, version increase per step)
    result: Any
    names: list[str] = field(default_factory=list)  # per entry, for messages
    drops: list[tuple[int, ...]] = field(default_factory=list)  # per entry: slots let go
    #: ``capture_hooks.generation()`` when recorded: a Variable moved or a module's parameter
    #: replaced since then makes the plan stale (the step's Python would read others).
    generation: int = -1
    backends: dict[int, Any] = field(default_factory=dict)  # var slot -> recorded backend

    @property
    def calls(self) -> int:
        return sum(1 for e in self.entries if e[0] == CALL)

    @property
    def call_names(self) -> list[str]:
        """The protocol method of each backend call, in the order a replay's ``timing``
        lists them."""
        return [self.names[i] for i, e in enumerate(self.entries) if e[0] == CALL]

    def replay(self, args: Sequence[Any], timing: list[float] | None = None) -> Any:
        """Run the plan on ``args``; ``timing`` (a list) gets the seconds spent inside
        backend calls appended (for benchmarks: what is not backend time is overhead)."""
        slots: list[Any] = [None] * self.n_slots
        dyn: list[Any] = [None] * self.n_dyn
        for slot, pos, base in self.arg_slots:
            a = args[pos]
            t = a._value if type(a) is Variable else a
            slots[slot] = t if layout(t) == base else Tensor(t.backend, t.storage, *base)
        for slot, var, lay, base in self.var_slots:
            t = var._value
            if layout(t) != lay:
                raise Stale(f"parameter {var.name or ''} {lay[0]} is now {t.shape} {t.dtype}")
            if t.backend is not self.backends[slot]:
                raise Stale(
                    f"parameter {var.name or ''} {lay[0]} moved from "
                    f"{_where(self.backends[slot])} to {_where(t.backend)}"
                )
            slots[slot] = t if lay == base else Tensor(t.backend, t.storage, *base)
        if self.generation != generation():
            raise Stale(
                "a Variable was moved to another device, or a module's parameter or child "
                "replaced, since the step was recorded"
            )
        for slot, t, version in self.pinned:
            if t.storage.version != version:
                raise Stale(f"a tensor {t.shape} the step reads was written since recording")
            slots[slot] = t
        for index, pos in self.arg_dyn:
            dyn[index] = args[pos]
        names, drops = self.names, self.drops
        for i, e in enumerate(self.entries):
            kind = e[0]
            if kind == CALL:
                if timing is None:
                    out = e[1](*[resolve(a, slots, dyn) for a in e[2]])
                else:
                    call_args = [resolve(a, slots, dyn) for a in e[2]]
                    t0 = perf_counter()
                    out = e[1](*call_args)
                    timing.append(perf_counter() - t0)
                if e[3] is not None:
                    bind(e[3], out, slots)
            elif kind == HOST:
                out = e[1](*[resolve(a, slots, dyn) for a in e[2]])
                bind_host(e[3], out, slots, dyn, names[i])
            else:
                e[1].grad = resolve(e[2], slots, dyn)
            for slot in drops[i]:  # last use: the buffer goes back as the eager step's would
                slots[slot] = None
        for slot, d in self.deltas:
            slots[slot].storage.version += d
        return build(self.result, slots, dyn)


def build(spec: Any, slots: list[Any], dyn: list[Any]) -> Any:
    """The step's return value from the replay's slots."""
    if spec is None:
        return None
    kind = spec[0]
    if kind == "v":
        return Variable(resolve(spec[1], slots, dyn))
    if kind == "seq":
        return spec[1](build(s, slots, dyn) for s in spec[2])
    return resolve(spec, slots, dyn)


def same(a: Any, b: Any) -> bool:
    """Templates, specs and constants equal as a replay would use them (NaN equals NaN,
    arrays by dtype and value, bound methods by function and instance)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, True))
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    if hasattr(a, "__func__") and hasattr(a, "__self__"):
        return a.__func__ is b.__func__ and a.__self__ is b.__self__
    if callable(a) and hasattr(a, "__code__"):
        return a.__code__ is b.__code__
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object without equality: identity decides
        return a is b


def difference(p: Plan, q: Plan) -> str | None:
    """Where two recordings of one step disagree (None: they are the same plan)."""
    if len(p.entries) != len(q.entries):
        return f"the step made {len(p.entries)} backend calls, then {len(q.entries)}"
    for i, (e, f) in enumerate(zip(p.entries, q.entries, strict=True)):
        if e[0] != f[0] or not same(e[1], f[1]):
            return f"call {i} was {p.names[i]}, then {q.names[i]}"
        if e[0] == GRAD:
            if not same(e[2], f[2]):
                return f"the gradient of {e[1].name or 'a parameter'} came from elsewhere"
            continue
        for j, (x, y) in enumerate(zip(e[2], f[2], strict=True)):
            if not same(x, y):
                return f"{p.names[i]} (call {i}) argument {j}: {_tpl(x)} then {_tpl(y)}"
        if not same(e[3], f[3]):
            return f"{p.names[i]} (call {i}) gave other outputs"
    pairs: list[tuple[str, Callable[[Plan], Any]]] = [
        # by storage and layout: a view the step makes of a cached tensor (a broadcast
        # arange) is a new object per call over the same memory
        ("pinned tensors", lambda x: [(s, id(t.storage), layout(t)) for s, t, _ in x.pinned]),
        ("parameters", lambda x: [(s, id(v)) for s, v, _, _ in x.var_slots]),
        ("version counts", lambda x: x.deltas),
        ("results", lambda x: x.result),
    ]
    for what, get in pairs:
        if not same(get(p), get(q)):
            return f"the {what} differ"
    return None


def _tpl(t: Any) -> str:
    if t[0] == C:
        return repr(t[1])[:60]
    if t[0] == D:
        return f"step number #{t[1]}"
    if t[0] == T:
        return f"slot {t[1]}"
    return f"{t[1].__name__} of {len(t[2])}"
