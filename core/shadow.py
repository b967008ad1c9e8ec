"""Shadow validation: re-run every op of a live program on the CPU reference.

``RIFTCO_VALIDATE=cpu`` (read when riftco is imported) or :func:`enable` installs a
validator in ``riftco.ops.dispatch``. Before each native backend call it copies the inputs
to the CPU backend in float64, reading each tensor's storage as raw bytes (so a broken
``copy_strided`` cannot corrupt the reference's inputs); after the call it runs the same
method there and raises :class:`~riftco.errors.ValidationError` at the first output that
diverges, naming the op, the shapes and the error. It is the tool for "my training run
goes wrong on this GPU": the first bad kernel is named, not the last NaN.

Tolerances are the op unit's, with ``atol`` relative to each output's own scale (its
largest finite magnitude, with no floor: live data is less tame than test data, and a
gradient of magnitude 1e-3 must still be checked to 1e-4 of itself) and a slack factor
(``RIFTCO_VALIDATE_SLACK``). In-place ops (``fill``, ``adam_update``,
``adam_update_multi``'s lists) are compared on the tensors they write. Off by default and
free when off: dispatch tests one module global. Ops on the CPU backend itself are not
shadowed (it *is* the reference).
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .device import Device
from .dtypes import is_float
from .errors import RiftcoError, ValidationError
from .ops import dispatch  # the module: its ``validator`` global is the hook
from .ops.comparison import compare
from .ops.opunit import OpUnit, Tolerance
from .ops.primitive.memory import host_view
from .tensor import Tensor

REFERENCE = "cpu"
_ENV = "RIFTCO_VALIDATE"
_SLACK_ENV = "RIFTCO_VALIDATE_SLACK"


class ShadowValidator:
    """Installed as ``riftco.ops.dispatch.validator``; counts what it checked."""

    def __init__(self, slack: float = 1.0) -> None:
        self.slack = slack
        self.checked = 0

    def before(self, unit: OpUnit, backend: Any, args: Sequence[Any]) -> Any:
        if backend.name == REFERENCE:
            return None
        ref = Device(REFERENCE, 0).backend
        return ref, [_down(a, ref) for a in args]

    def after(self, unit: OpUnit, backend: Any, args: Sequence[Any], out: Any, state: Any) -> None:
        if state is None:
            return
        ref, ref_args = state
        expected = getattr(ref, unit.name)(*ref_args)
        if unit.in_place:  # a written argument may be a list (adam_update_multi's params)
            positions = _written(unit)
            got = [_flat(args[i]) for i in positions]
            want = [_flat(ref_args[i]) for i in positions]
            names = list(unit.outputs)
        else:
            got, want = _per_output(out), _per_output(expected)
            names = list(unit.outputs) if len(unit.outputs) == len(got) else []
        self.checked += 1
        shapes = ", ".join(_describe(a) for a in args)
        who = f"backend {backend.name}:{backend.device_index}"
        if [len(g) for g in got] != [len(w) for w in want]:
            raise ValidationError(
                f"[{unit.name}] shadow validation: {who} returned {sum(map(len, got))} "
                f"outputs, the cpu reference {sum(map(len, want))}; inputs: {shapes}"
            )
        named = []
        for i, (gs, ws) in enumerate(zip(got, want, strict=True)):
            name = names[i] if names else f"output {i}"
            for j, pair in enumerate(zip(gs, ws, strict=True)):
                named.append((f"{name}[{j}]" if len(gs) > 1 else name, *pair))
        for name, g, e in named:
            problem = _diverges(unit, g, e, self.slack)
            if problem:
                raise ValidationError(
                    f"[{unit.name}] shadow validation: {who} diverges from the cpu float64 "
                    f"reference; {name} {tuple(g.shape)} {g.dtype}: {problem}; inputs: {shapes}"
                )


def _written(unit: OpUnit) -> list[int]:
    """Argument positions an in-place op writes: its outputs are named like its parameters."""
    params = list(inspect.signature(unit.method).parameters)[1:]  # drop self
    return [params.index(name) for name in unit.outputs]


def _down(a: Any, ref: Any) -> Any:
    """One argument on the reference: float tensors widen to float64, lists recurse."""
    if isinstance(a, Tensor):
        arr = host_view(a)
        return ref.from_numpy(arr.astype(np.float64) if is_float(arr.dtype) else arr)
    if isinstance(a, (list, tuple)):
        return type(a)(_down(x, ref) for x in a)
    return a


def _flat(out: Any) -> list[np.ndarray]:
    if isinstance(out, Tensor):
        return [host_view(out)]
    if isinstance(out, (list, tuple)):
        return [x for o in out for x in _flat(o)]
    return []


def _per_output(out: Any) -> list[list[np.ndarray]]:
    """An op's result as one list of arrays per output (a list output keeps its items)."""
    if isinstance(out, tuple):
        return [_flat(o) for o in out]
    return [_flat(out)]


def _describe(a: Any) -> str:
    if isinstance(a, Tensor):
        return f"{a.shape} {a.dtype.name}"
    if isinstance(a, (list, tuple)) and a and isinstance(a[0], Tensor):
        return "[" + ", ".join(_describe(x) for x in a) + "]"
    return repr(a)


def _diverges(unit: OpUnit, got: np.ndarray, expected: np.ndarray, slack: float) -> str:
    if got.shape != expected.shape:
        return f"shape {got.shape}, reference {expected.shape}"
    if got.dtype.kind != np.asarray(expected).dtype.kind and got.dtype.kind != "f":
        return f"dtype {got.dtype}, reference {expected.dtype}"
    tol = unit.tolerance.for_dtype(got.dtype)
    finite = np.abs(expected[np.isfinite(expected)]) if expected.size else np.zeros(0)
    # atol is relative to this output's own scale (its largest finite magnitude), with no
    # floor: a floor of 1 let 1 % errors through in outputs of magnitude 1e-3 (issue 31).
    # Only an output the reference makes all zero falls back to atol itself.
    scale = float(finite.max()) if finite.size else 0.0
    tol = Tolerance(tol.atol * (scale or 1.0) * slack, tol.rtol * slack)
    comp = compare("out", got, expected, tol)
    return "" if comp.ok else comp.describe().removeprefix("out: ")


_installed: ShadowValidator | None = None


def enable(reference: str = REFERENCE, slack: float = 1.0) -> ShadowValidator:
    """Shadow every op from now on. Only the CPU backend can be the reference."""
    global _installed
    if reference != REFERENCE:
        raise ValueError(f"[shadow] the only reference is {REFERENCE!r}; got {reference!r}")
    _installed = ShadowValidator(slack)
    dispatch.validator = _installed
    return _installed


def disable() -> None:
    global _installed
    _installed = None
    dispatch.validator = None


def is_enabled() -> bool:
    return isinstance(dispatch.validator, ShadowValidator)


class _Misconfigured:
    """Installed for a ``RIFTCO_VALIDATE`` (or ``_SLACK``) value riftco cannot honour: the
    import succeeds (a traceback at ``import riftco`` names no command), and the first op
    raises the reason as a RiftcoError, which every riftco command prints as one line.
    Running unvalidated would silently drop what was asked for."""

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def before(self, unit: OpUnit, backend: Any, args: Sequence[Any]) -> Any:
        raise RiftcoError(self.problem)

    def after(self, *args: Any) -> None:  # pragma: no cover - before always raises
        raise RiftcoError(self.problem)


def install_from_env() -> None:
    """Read ``RIFTCO_VALIDATE`` (``cpu`` enables; empty, ``0``, ``off``, ``false`` or ``no``
    leaves it off) and ``RIFTCO_VALIDATE_SLACK`` (a positive factor, default 1)."""
    raw = os.environ.get(_ENV, "")
    value = raw.strip().lower()
    if value in ("", "0", "off", "false", "no"):
        return
    if value != REFERENCE:
        dispatch.validator = _Misconfigured(
            f"[shadow] {_ENV}={raw!r} is not supported: {_ENV}=cpu checks every op against "
            f"the CPU reference (the only one), {_ENV}=0 turns validation off"
        )
        return
    raw_slack = os.environ.get(_SLACK_ENV, "").strip() or "1"
    try:
        slack = float(raw_slack)
    except ValueError:
        slack = math.nan
    if not (math.isfinite(slack) and slack > 0):
        dispatch.validator = _Misconfigured(
            f"[shadow] {_SLACK_ENV}={raw_slack!r} must be a positive number (the factor on "
            "every tolerance; default 1)"
        )
        return
    enable(REFERENCE, slack)


install_from_env()
