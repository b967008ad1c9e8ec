"""``riftco.capture(step)``: record a training step once, replay it without its Python.

This package (``riftco.replay``) holds the machinery; ``riftco.capture`` is the function.

What tinygrad's TinyJit, CUDA graphs and ``mx.compile`` give their users, at riftco's
backend boundary: the first call of a step runs as written (warm-up: optimizer state,
kernel builds); the next two run as written *and* are recorded, and must record the same
plan; from then on a call with arguments of the same shapes, dtypes and devices replays
the recorded backend calls directly — no autograd graph, no op-level validation, no
per-op dispatch or result-contract checks, none of the model's Python.

The contract (JAX's ``jit`` and TinyJit have the same one):

* Tensors and Variables the step gets as **arguments** are read fresh on every replay;
  so are the values of **parameters** whose gradients the step publishes, and whatever
  **host functions** (``riftco.ops.capture_hooks.host``: the optimizer's bookkeeping,
  value checks) hand over. Python numbers passed as arguments are refilled (a scheduled
  learning rate); every other Python value is frozen at its recorded value. A recording
  that made a different plan the second time (a number that changes per call but is not
  an argument) is refused with a ``CaptureWarning`` naming the call and argument, and
  the step keeps running as written.
* Other tensors the step only reads (a mask, a gradient seed) are kept from the
  recording; one written in place between calls makes the next call record again.
* A step that downloads device values (``.item()``, ``.numpy()``) may act on them: it
  runs as written (``CaptureWarning``); return such tensors instead.
* A parameter moved to another device (``Variable.to``, ``Module.to``), or a module's
  parameter or child replaced by a new object, records again (``CaptureWarning``): the
  replay would read the old one, and the recording ends as the eager step ends (its
  ``DeviceMismatchError``, or the new parameter trained).
* Each thread records and replays its own steps (the recorder is per thread). The count
  of moves and replacements is process-wide: a model changed in one thread makes the
  other threads' steps record once more.
* Arguments with other shapes record again, with a ``CaptureWarning``; a number
  argument whose sign, finiteness or type changed runs that call as written (so a NaN
  learning rate reaches the op's own check).

Replays give the same bits as the eager step (the same backend calls on the same data in
the same order): gradients, optimizer state, losses. Value checks (class ids in range,
positive inputs of log) run on every replay at the point the eager step runs them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..autograd import Variable
from ..errors import CaptureError
from ..ops.capture_hooks import ACTIVE, DynamicFloat, DynamicInt
from ..tensor import Tensor
from .plan import Plan, Stale, difference
from .record import Recorder, start, stop

R = TypeVar("R")

__all__ = ["capture", "Captured", "CaptureWarning", "CaptureError", "CaptureStats"]


class CaptureWarning(UserWarning):
    """A captured step is recorded again, or runs as written, and why."""


@dataclass
class CaptureStats:
    """How a captured step's calls ran: as written, recorded, or replayed."""

    eager: int = 0
    recorded: int = 0
    replayed: int = 0
    backend_calls: int = 0  # per replay, of the current plan


@dataclass
class _Key:
    plan: Plan | None = None
    candidate: Plan | None = None
    seen: int = 0
    eager_only: str = ""  # why this signature always runs as written
    signs: tuple[Any, ...] = ()


def _signature(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(the key a plan is kept under, the sign class of each number argument)."""
    key: list[Any] = []
    signs: list[Any] = []
    for a in args:
        kind = type(a)
        if kind is Variable or kind is Tensor:
            t = a._value if kind is Variable else a
            extra = (a.requires_grad,) if kind is Variable else ()
            key.append((kind.__name__, t.shape, t.strides, t.offset, t.dtype, t.backend, *extra))
        elif kind is float or kind is int:
            key.append(kind.__name__)
            signs.append((kind, math.isfinite(a), (a > 0) - (a < 0)))
        else:
            try:
                hash(a)
            except TypeError:
                raise CaptureError(
                    f"[capture] argument of type {kind.__name__} is neither a Tensor, a "
                    "Variable, a number nor hashable; a captured step freezes such values, "
                    "so it must be able to tell them apart"
                ) from None
            key.append(("const", kind, a))
    return tuple(key), tuple(signs)


class Captured(Generic[R]):
    """A step function that records itself and then replays (see the module docstring)."""

    def __init__(
        self, fn: Callable[..., R], *, warmup: int = 1, verify: bool = True, warn: bool = True
    ) -> None:
        self.fn = fn
        self.warn = warn
        self.refused = ""  # the last reason a recording could not be replayed
        self.timing: list[float] | None = None  # a list: replays add their backend seconds
        self.warmup = warmup
        self.verify = verify
        self.stats = CaptureStats()
        self._keys: dict[tuple[Any, ...], _Key] = {}
        self._last: tuple[Any, ...] | None = None

    @property
    def plans(self) -> list[Plan]:
        """The plans being replayed, one per argument signature seen (for profiles and
        benchmarks: ``Plan.call_names`` lines up with a replay's ``timing``)."""
        return [s.plan for s in self._keys.values() if s.plan is not None]

    def __call__(self, *args: Any) -> R:
        if ACTIVE.recorder is not None:
            raise CaptureError("[capture] a captured step was called inside another recording")
        key, signs = _signature(args)
        state = self._keys.get(key)
        if state is None:
            if self._last is not None:
                warnings.warn(
                    f"[capture] {self._name()}: arguments changed ({_diff(self._last, key)}); "
                    "recording the step again for them",
                    CaptureWarning,
                    stacklevel=2,
                )
            state = self._keys[key] = _Key()
        self._last = key
        if state.plan is not None:
            if signs != state.signs:
                self.stats.eager += 1
                return self.fn(*args)  # the op's own checks see the new number
            try:
                out = state.plan.replay(args, self.timing)
            except Stale as stale:
                warnings.warn(
                    f"[capture] {self._name()}: {stale}; recording the step again",
                    CaptureWarning,
                    stacklevel=2,
                )
                state.plan = state.candidate = None
            else:
                self.stats.replayed += 1
                return out
        if state.eager_only or state.seen < self.warmup:
            state.seen += 1
            self.stats.eager += 1
            return self.fn(*args)
        plan, out, refusal = self._record(args)
        self.stats.recorded += 1
        if plan is None:
            self._refuse(state, refusal)
            return out
        if self.verify and state.candidate is None:
            state.candidate = plan
            return out
        if self.verify and state.candidate is not None:
            why = difference(state.candidate, plan)
            if why is not None:
                self._refuse(
                    state,
                    f"two recordings differ ({why}); a value that changes per call must be "
                    "an argument of the step",
                )
                return out
        state.plan, state.signs = plan, signs
        self.stats.backend_calls = plan.calls
        return out

    def _refuse(self, state: _Key, why: str) -> None:
        """This signature runs as written from now on; say why once."""
        state.eager_only = self.refused = why
        if self.warn:
            warnings.warn(
                f"[capture] {self._name()} cannot be replayed: {why}. It keeps running as written",
                CaptureWarning,
                stacklevel=3,
            )

    def _record(self, args: tuple[Any, ...]) -> tuple[Plan | None, Any, str]:
        rec = Recorder()
        dyn_args = list(args)
        arg_dyn = []
        for pos, a in enumerate(args):
            if type(a) is float or type(a) is int:
                d: Any = DynamicFloat(a) if type(a) is float else DynamicInt(a)
                d.index = len(rec.dyn)
                rec.dyn.append(d)
                arg_dyn.append((d.index, pos))
                dyn_args[pos] = d
        for a in args:
            t = a._value if type(a) is Variable else a
            if type(t) is Tensor:
                rec.see(t.backend)
        start(rec)
        try:
            out = self.fn(*dyn_args)
            plan = rec.finish(args, arg_dyn, out)
        finally:
            stop(rec)
        return plan, out, rec.refusal

    def _name(self) -> str:
        return getattr(self.fn, "__qualname__", "step")


def _diff(old: tuple[Any, ...], new: tuple[Any, ...]) -> str:
    if len(old) != len(new):
        return f"{len(old)} arguments, now {len(new)}"
    for i, (a, b) in enumerate(zip(old, new, strict=True)):
        if a != b:
            return f"argument {i}: {_short(a)} -> {_short(b)}"
    return "same"


def _short(k: Any) -> str:
    if type(k) is tuple and k and k[0] in ("Tensor", "Variable"):
        return f"{k[0]} {k[1]} {k[4]} on {k[5].name}:{k[5].device_index}"
    return str(k)[:60]


def capture(
    fn: Callable[..., R], *, warmup: int = 1, verify: bool = True, warn: bool = True
) -> Captured[R]:
    """Wrap ``fn`` to be recorded once and replayed (see :mod:`riftco.replay`).

    ``warmup`` calls run as written first; ``verify`` records twice and replays only
    when both recordings agree; ``warn`` says with a ``CaptureWarning`` when a step
    cannot be replayed (``Captured.refused`` keeps the reason either way)."""
    return Captured(fn, warmup=warmup, verify=verify, warn=warn)
