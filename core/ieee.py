"""numpy's floating-point warnings off for one block, cheaply.

Every op's spec asks for IEEE results: ``exp(1000) = inf``, ``inf - inf = NaN``. numpy
gives them, and also a RuntimeWarning ("overflow encountered in add") that says nothing
new, that ``-W error`` (this project's pytest setting) turns into an exception raised half
way through an op, and that ``np.seterr(all="raise")`` in a user's program turns into a
FloatingPointError. So the numpy backends never let such a warning out: multi-line ops
(fused ops, casts, reductions) compute inside :class:`quiet`, and the hot one-line ones
try numpy plainly and repeat quietly only when it complained (:data:`LOUD`).

``np.errstate(all="ignore")`` costs about 1.1 us per use, a quarter of a tiny op's whole
time; :class:`quiet` sets the same error state through the context variable numpy keeps
it in (numpy >= 2), about 0.45 us as a ``with`` block and 0.2 us through :func:`call`, and
falls back to ``np.errstate`` where that variable is absent.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def _find_state() -> ContextVar[Any] | None:
    """numpy's error-state context variable (numpy >= 2), or None where it is elsewhere."""
    try:
        from numpy._core._ufunc_config import _extobj_contextvar
    except Exception:  # pragma: no cover - numpy 1.x, or a future layout
        return None
    return _extobj_contextvar if isinstance(_extobj_contextvar, ContextVar) else None


_state = _find_state()

_IGNORE: Any = None
if _state is not None:
    with np.errstate(all="ignore"):
        _IGNORE = _state.get()


class _Quiet:
    """``with quiet():`` ignores over/under-flow, division by zero and invalid operations."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token: Token[Any] = _state.set(_IGNORE)  # type: ignore[union-attr]

    def __exit__(self, *exc: object) -> None:
        _state.reset(self._token)  # type: ignore[union-attr]


def _errstate() -> Any:
    return np.errstate(all="ignore")


#: What numpy raises for an IEEE special when the caller made its warnings errors
#: (``-W error``, ``np.seterr(all="raise")``). A hot one-line op runs numpy plainly (zero
#: cost) and repeats the call quietly on one of these: pure ops have written nothing yet.
#: Under default warning filters numpy then prints its note once per line, as numpy does.
LOUD: tuple[type[Exception], ...] = (RuntimeWarning, FloatingPointError)

#: A fresh context manager per ``with``: nesting and threads are safe.
quiet = _Quiet if _state is not None else _errstate


def call(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` inside :class:`quiet`, for one-expression hot paths (an elementwise
    op on tiny tensors): half the cost of the ``with`` statement, ~0.2 us."""
    if _state is None:  # pragma: no cover - numpy 1.x
        with np.errstate(all="ignore"):
            return fn(*args)
    token = _state.set(_IGNORE)
    try:
        return fn(*args)
    finally:
        _state.reset(token)
