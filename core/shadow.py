"""Shadow validation: re-run every op of a live program on the CPU reference.

``RIFTCO_VALIDATE=cpu`` (read when riftco is imported) or :func:`enable` installs a
validator in ``tensor_ops``; after each backend call it copies the inputs down to the CPU
backend in float64, runs the same backend method there and raises
:class:`~riftco.errors.ValidationError` at the first output that diverges beyond the
conformance tolerance, naming the op, the shapes and the error. It is the tool for "my
training run goes wrong on this GPU": the first bad kernel is named, not the last NaN.

Off by default and free when off: ``tensor_ops._call`` tests one module global. Ops on the
CPU backend itself are not shadowed (it *is* the reference), nor are in-place ops (``fill``,
``adam_update``) whose inputs are already overwritten when the validator runs.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from . import tensor_ops
from .errors import ValidationError
from .tensor import Tensor

REFERENCE = "cpu"
IN_PLACE_OPS = frozenset({"fill", "adam_update"})
_ENV = "RIFTCO_VALIDATE"
_SLACK_ENV = "RIFTCO_VALIDATE_SLACK"


class ShadowValidator:
    """Callable installed as ``tensor_ops.validator``; counts what it checked."""

    def __init__(self, slack: float = 1.0) -> None:
        self.slack = slack  # multiplies every tolerance: live data is less tame than tests
        self.checked = 0

    def __call__(self, op: str, backend: Any, args: tuple[Any, ...], out: Any) -> None:
        if backend.name == REFERENCE or op in IN_PLACE_OPS:
            return
        from .device import Device

        ref = Device(REFERENCE, 0).backend
        ref_args = [_down(a, ref) for a in args]
        expected = getattr(ref, op)(*ref_args)
        got_list, exp_list = _flat(out), _flat(expected)
        self.checked += 1
        for i, (g, e) in enumerate(zip(got_list, exp_list, strict=False)):
            message = _diverges(op, g, e, self.slack)
            if message:
                shapes = ", ".join(_describe(a) for a in args)
                where = f"output {i}" if len(got_list) > 1 else "output"
                raise ValidationError(
                    f"[{op}] shadow validation: backend {backend.name}:{backend.device_index} "
                    f"diverges from the cpu float64 reference; {where} {tuple(g.shape)} "
                    f"{g.dtype}: {message}; inputs: {shapes}"
                )


def _down(a: Any, ref: Any) -> Any:
    """Copy one argument to the reference: float tensors widen to float64, lists recurse."""
    if isinstance(a, Tensor):
        arr = a.numpy()
        return ref.from_numpy(arr.astype(np.float64) if arr.dtype.kind == "f" else arr)
    if isinstance(a, (list, tuple)):
        return type(a)(_down(x, ref) for x in a)
    if isinstance(a, np.dtype):
        return a
    return a


def _flat(out: Any) -> list[np.ndarray]:
    if isinstance(out, Tensor):
        return [out.numpy()]
    if isinstance(out, (list, tuple)):
        return [x for o in out for x in _flat(o)]
    return []


def _describe(a: Any) -> str:
    if isinstance(a, Tensor):
        return f"{a.shape} {a.dtype.name}"
    if isinstance(a, (list, tuple)) and a and isinstance(a[0], Tensor):
        return "[" + ", ".join(_describe(x) for x in a) + "]"
    return repr(a)


def _diverges(op: str, got: np.ndarray, expected: np.ndarray, slack: float) -> str:
    from riftco.conformance.compare import compare
    from riftco.conformance.tolerances import Tolerance, tolerance

    if got.shape != expected.shape:
        return f"shape {got.shape}, reference {expected.shape}"
    tol = tolerance(op, got.dtype)
    mag = float(np.max(np.abs(expected[np.isfinite(expected)]), initial=1.0))
    # accumulating ops on live data: scale atol by the result's magnitude, then the slack
    tol = Tolerance(tol.atol * max(1.0, mag) * slack, tol.rtol * slack)
    comp = compare("out", got, expected, tol)
    return "" if comp.ok else comp.describe().removeprefix("out: ")


_installed: ShadowValidator | None = None


def enable(reference: str = REFERENCE, slack: float = 1.0) -> ShadowValidator:
    """Shadow every op from now on. Only the CPU backend can be the reference."""
    global _installed
    if reference != REFERENCE:
        raise ValueError(f"[shadow] the only reference is {REFERENCE!r}; got {reference!r}")
    _installed = ShadowValidator(slack)
    tensor_ops.validator = _installed
    return _installed


def disable() -> None:
    global _installed
    _installed = None
    tensor_ops.validator = None


def is_enabled() -> bool:
    return tensor_ops.validator is not None


def install_from_env() -> None:
    """Read ``RIFTCO_VALIDATE`` (``cpu`` enables; empty, ``0`` or ``off`` leaves it off)."""
    value = os.environ.get(_ENV, "").strip().lower()
    if value in ("", "0", "off", "false", "no"):
        return
    if value != REFERENCE:
        raise ValueError(f"[shadow] {_ENV}={value!r} is not supported; use {_ENV}=cpu")
    enable(REFERENCE, float(os.environ.get(_SLACK_ENV, "1") or 1))


install_from_env()
