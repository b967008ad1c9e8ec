"""Recording one run of a step at the backend boundary.

While a step is recorded, every backend it reaches has its protocol methods shadowed by
instance attributes that log each call (arguments as slot templates, outputs as new
slots) and then run it. Only the outermost call is logged: a method that calls another
method of its backend, or a composite's primitives inside a host function, run as they
are. So direct calls the op layer makes (``allocate`` and ``fill`` for a gradient seed)
are seen exactly like dispatched ones. The shadows are removed when the run ends, even
when it raises (when the last one ends, if other threads record through the same backend:
a shadow logs only the calls of a thread whose recording reached that backend).

A download (``to_numpy``) inside the step is refused: a replay cannot branch on device
values. Value checks that must read device data do it through ``capture_hooks.host``,
which keeps them for the replay.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..autograd import Variable
from ..errors import CaptureError
from ..ops import units
from ..ops.capture_hooks import ACTIVE, DYNAMIC, DynamicFloat, DynamicInt, generation
from ..tensor import Tensor
from .plan import CALL, GRAD, HOST, C, D, Layout, Plan, S, T, layout

#: Protocol methods that are not op units but move or make data.
MEMORY_METHODS = ("allocate", "from_numpy", "to_numpy", "fill", "synchronize")
_MISSING = object()


class Recorder:
    """Collects one run's calls; :meth:`finish` turns them into a :class:`Plan`."""

    def __init__(self) -> None:
        self.entries: list[tuple[Any, ...]] = []
        self.names: list[str] = []
        self.slot: dict[int, int] = {}  # id(storage) -> slot
        self.bases: list[Tensor] = []  # slot -> first tensor seen (keeps the id valid)
        self.made: list[bool] = []  # slot -> produced inside the step (call or host)
        self.by_call: set[int] = set()  # slots a backend call produced (intermediates)
        self.first_version: list[int] = []
        self.dyn: list[Any] = []
        self.depth = 0
        self.shadowed: dict[int, Any] = {}  # id(backend) -> backend, shadows installed
        self.published_vars: list[Variable] = []
        self.refusal = ""  # why this run cannot be replayed (it still runs to the end)

    def refuse(self, why: str) -> None:
        if not self.refusal:
            self.refusal = why

    # -- the hooks the layers below call -------------------------------------------------
    def see(self, backend: Any) -> None:
        if id(backend) in self.shadowed:
            return
        _install(backend)
        self.shadowed[id(backend)] = backend

    def host(self, fn: Callable[..., Any], tensors: tuple[Any, ...]) -> Any:
        if self.depth:
            return fn(*tensors)
        tpl = tuple(self.arg(t) for t in tensors)
        self.depth += 1
        try:
            out = fn(*tensors)
        finally:
            self.depth -= 1
        name = getattr(fn, "__qualname__", "host function")
        spec, out = self.host_out(out, name)
        self.entries.append((HOST, fn, tpl, spec))
        self.names.append(name)
        return out

    def published(self, var: Variable, grad: Tensor) -> None:
        if self.depth:
            return
        if var._backward is not None:
            self.refuse(
                "the step publishes the gradient of a non-leaf Variable (retain_grad); a "
                "replay has no graph to hold it: return that gradient instead"
            )
            return
        self.entries.append((GRAD, var, self.arg(grad)))
        self.names.append(f"{var.name or 'parameter'}.grad")
        self.published_vars.append(var)

    # -- shadows ---------------------------------------------------------------------------
    def call(self, name: str, method: Callable[..., Any], backend: Any, args: Any) -> Any:
        """A backend call made by this recorder's thread: logged, then run."""
        if self.depth:
            return method(*args)
        if name == "to_numpy":  # the step may branch on what it reads: not replayable
            x = args[0]
            self.refuse(
                f"the step downloads a tensor {x.shape} {x.dtype.name} from "
                f"{backend.name} (.numpy(), .item()) and may act on its values; return "
                "the tensor from the step and read it after the call"
            )
            return method(*args)
        tpl = tuple(self.arg(a) for a in args)
        self.depth += 1
        try:  # the backend gets plain numbers: numpy treats a float subclass as float64
            out = method(*[_plain(a) for a in args])
        finally:
            self.depth -= 1
        self.entries.append((CALL, method, tpl, self.out_spec(out)))
        self.names.append(name)
        return out

    def restore(self) -> None:
        for backend in self.shadowed.values():
            _uninstall(backend)
        self.shadowed.clear()

    # -- templates -------------------------------------------------------------------------
    def new_slot(self, t: Tensor, made: bool) -> int:
        i = len(self.bases)
        self.slot[id(t.storage)] = i
        self.bases.append(t)
        self.made.append(made)
        self.first_version.append(t.storage.version)
        return i

    def arg(self, a: Any) -> tuple[Any, ...]:
        kind = type(a)
        if kind is Tensor:
            i = self.slot.get(id(a.storage))
            if i is None:
                i = self.new_slot(a, False)
            b = self.bases[i]
            return (T, i, None if a is b or layout(a) == layout(b) else layout(a))
        if kind is list or kind is tuple:
            return (S, kind, tuple(self.arg(x) for x in a))
        if kind in DYNAMIC:
            return (D, a.index)
        if kind is Variable:
            raise CaptureError("[capture] a Variable reached a backend call (expected a Tensor)")
        if kind is np.ndarray:
            return (C, a.copy())  # an upload of host data made by the step: its value then
        return (C, a)

    def out_spec(self, out: Any) -> Any:
        if type(out) is Tensor:
            if id(out.storage) in self.slot:
                return None
            i = self.new_slot(out, True)
            self.by_call.add(i)
            return (T, i)
        if type(out) in (list, tuple):
            specs = tuple(self.out_spec(o) for o in out)
            return None if all(s is None for s in specs) else (S, specs)
        return None

    def host_out(self, out: Any, what: str) -> tuple[Any, Any]:
        """The spec a replay checks a host function's result against, and the result with
        its numbers made dynamic (so the calls they reach are refilled on replay)."""
        kind = type(out)
        if kind is Tensor:
            i = self.slot.get(id(out.storage))
            if i is None:
                i = self.new_slot(out, True)
            return (T, i, layout(out), layout(self.bases[i]), out.backend), out
        if kind is int or kind is float:
            d: Any = DynamicInt(out) if kind is int else DynamicFloat(out)
            d.index = len(self.dyn)
            self.dyn.append(d)
            return (D, d.index, kind), d
        if kind is list or kind is tuple:
            pairs = [self.host_out(x, what) for x in out]
            return (S, tuple(p[0] for p in pairs)), kind(p[1] for p in pairs)
        if out is None or kind in (bool, str):
            return (C, out), out
        raise CaptureError(
            f"[capture] host function {what} returned a {kind.__name__}; host functions "
            "hand over tensors, numbers and lists or tuples of them"
        )

    # -- the end ----------------------------------------------------------------------------
    def finish(
        self, args: Sequence[Any], arg_dyn: list[tuple[int, int]], result: Any
    ) -> Plan | None:
        """The plan of this run, or None when it cannot be replayed (see ``refusal``)."""
        arg_slots = []
        for pos, a in enumerate(args):
            t = a._value if type(a) is Variable else a
            if type(t) is Tensor and id(t.storage) in self.slot:
                i = self.slot[id(t.storage)]  # templates view the slot's first-seen layout
                arg_slots.append((i, pos, layout(self.bases[i])))
        from_args = {i for i, _, _ in arg_slots}
        var_slots: list[tuple[int, Variable, Layout, Layout]] = []
        for var in self.published_vars:
            j = self.slot.get(id(var._value.storage))
            if j is not None and j not in from_args and not self.made[j]:
                var_slots.append((j, var, layout(var._value), layout(self.bases[j])))
        sourced = from_args | {i for i, _, _, _ in var_slots}
        spec = self.result_spec(result)
        drops, dropped = self.lifetimes(spec)
        pinned = []
        deltas = []
        for i, t in enumerate(self.bases):
            d = t.storage.version - self.first_version[i]
            if d and i not in dropped:
                deltas.append((i, d))
            if self.made[i] or i in sourced:
                continue
            if d:
                self.refuse(
                    f"the step writes a tensor {t.shape} {t.dtype.name} it neither made nor "
                    "got as an argument or parameter; a replay would write the recorded one "
                    "again. Pass it to the step as an argument"
                )
            pinned.append((i, t, t.storage.version))
        if self.refusal:
            self.bases = []
            return None
        plan = Plan(
            entries=self.entries,
            n_slots=len(self.bases),
            n_dyn=len(self.dyn),
            arg_slots=arg_slots,
            arg_dyn=arg_dyn,
            var_slots=var_slots,
            pinned=pinned,
            deltas=deltas,
            result=spec,
            names=self.names,
            drops=drops,
            generation=generation(),
            backends={j: self.bases[j].backend for j, _, _, _ in var_slots},
        )
        self.bases = []  # the recording's intermediates die with it
        return plan

    def lifetimes(self, result: Any) -> tuple[list[tuple[int, ...]], set[int]]:
        """Per entry, the intermediates the replay can let go of after it (their last
        use), so a replay holds no more memory than the eager step; and all of them.
        What the step returns or publishes, and every tensor it did not make with a
        backend call, lives to the end."""
        last: dict[int, int] = {}
        for k, e in enumerate(self.entries):
            for t in e[2] if e[0] != GRAD else (e[2],):
                for i in _slots(t):
                    last[i] = k
        keep = set(_slots(result)) if result is not None else set()
        for e in self.entries:
            if e[0] == GRAD:
                keep.update(_slots(e[2]))
        drops: list[list[int]] = [[] for _ in self.entries]
        dropped = set()
        for i in self.by_call - keep:
            if i in last:
                drops[last[i]].append(i)
                dropped.add(i)
        return [tuple(d) for d in drops], dropped

    def result_spec(self, out: Any) -> Any:
        if out is None:
            return None
        if type(out) is Variable:
            return ("v", self.arg(out._value))
        if type(out) is Tensor:
            return self.arg(out)
        if type(out) in (list, tuple):
            return ("seq", type(out), tuple(self.result_spec(o) for o in out))
        self.refuse(
            f"the step returned a {type(out).__name__}; a captured step returns Tensors, "
            "Variables, None or tuples of them (a Python number would be frozen at its "
            "recorded value)"
        )
        return None


def _slots(tpl: Any) -> list[int]:
    """The slots a template (or a result spec) reads."""
    if not isinstance(tpl, tuple) or not tpl:
        return []
    if tpl[0] == T and len(tpl) == 3 and isinstance(tpl[1], int):
        return [tpl[1]]
    if tpl[0] == S or tpl[0] == "seq":
        return [i for t in tpl[-1] for i in _slots(t)]
    if tpl[0] == "v":
        return _slots(tpl[1])
    return []


def _plain(a: Any) -> Any:
    kind = type(a)
    if kind is DynamicFloat:
        return float(a)
    if kind is DynamicInt:
        return int(a)
    return a


# Shadows are installed once per backend however many threads record through it, and
# removed when the last of those recordings ends: each shadow logs only calls made by a
# thread whose recorder has seen that backend, and runs every other call as it is.
_lock = threading.Lock()
_installed: dict[int, tuple[Any, dict[str, Any], list[int]]] = {}  # id -> (backend, saved, count)


def _install(backend: Any) -> None:
    with _lock:
        held = _installed.get(id(backend))
        if held is not None:
            held[2][0] += 1
            return
        try:
            own = vars(backend)
        except TypeError:
            raise CaptureError(
                f"[capture] backend {backend.name} cannot be recorded: its instance takes no "
                "attributes (__slots__ without __dict__)"
            ) from None
        names = [u.name for u in units()] + list(MEMORY_METHODS)
        saved: dict[str, Any] = {}
        for name in dict.fromkeys(names):
            method = getattr(backend, name, None)
            if method is None or not callable(method):
                continue
            saved[name] = own.get(name, _MISSING)
            own[name] = _shadow(name, method, backend)
        _installed[id(backend)] = (backend, saved, [1])


def _uninstall(backend: Any) -> None:
    with _lock:
        _, saved, count = _installed[id(backend)]
        count[0] -= 1
        if count[0]:
            return
        del _installed[id(backend)]
        own = vars(backend)
        for name, prev in saved.items():
            if prev is _MISSING:
                own.pop(name, None)
            else:
                own[name] = prev


def _shadow(name: str, method: Callable[..., Any], backend: Any) -> Callable[..., Any]:
    key = id(backend)

    def recorded(*args: Any) -> Any:
        rec = ACTIVE.recorder
        if type(rec) is not Recorder or key not in rec.shadowed:  # not ours: run it as is
            return method(*args)
        return rec.call(name, method, backend, args)

    return recorded


def start(recorder: Recorder) -> None:
    if ACTIVE.recorder is not None:
        raise CaptureError("[capture] a captured step ran inside another step being recorded")
    ACTIVE.recorder = recorder


def stop(recorder: Recorder) -> None:
    ACTIVE.recorder = None
    recorder.restore()
