"""What the layers below ``riftco.capture`` need to know about a recording in progress.

``riftco.capture`` records a step at the backend boundary and replays it without running
its Python. Three things the step's Python does cannot be seen at that boundary, so the
code that does them reports them here:

* numbers that change from step to step (a scheduled learning rate, an optimizer's step
  count): :class:`DynamicFloat` and :class:`DynamicInt` carry them through the op layer
  unchanged (``checks.number`` keeps them), so the recording knows which argument of which
  backend call to refill;
* host work the replay must redo (value checks that read device data and raise, an
  optimizer's bookkeeping): :func:`host` runs a function and, while recording, keeps it to
  run again at the same point of every replay, with the replay's tensors;
* gradients published to ``Variable.grad`` (:func:`published`).

Outside a recording each hook costs one attribute read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

R = TypeVar("R")


class DynamicFloat(float):
    """A float the recording refills on every replay (an argument of the captured step,
    or a number a host function returns). Arithmetic on it gives a plain float: a number
    derived from it is frozen, which the recording detects (see ``riftco.replay``)."""

    index: int


class DynamicInt(int):
    """An int the recording refills on every replay (see :class:`DynamicFloat`)."""

    index: int


DYNAMIC = (DynamicFloat, DynamicInt)


class Recorder(Protocol):
    def host(self, fn: Callable[..., Any], tensors: tuple[Any, ...]) -> Any: ...
    def published(self, var: Any, grad: Any) -> None: ...
    def see(self, backend: Any) -> None: ...


class _Active(threading.local):
    """Per thread: a recording belongs to the thread that runs the step, so two threads
    may each record (or replay) their own captured step at once."""

    recorder: Recorder | None = None


ACTIVE = _Active()

#: Bumped whenever a Variable moves to another device (``Variable.to``) or a module binds a
#: new parameter or child where one was (``Module.__setattr__``). A replay never runs the
#: step's Python, so it cannot see the model bind a new Variable; a plan recorded under
#: another generation is recorded again (``riftco.replay``).
_generation = [0]


def bump_generation() -> None:
    """Say that the parameters a recorded step would read may have changed. (A value given
    with ``Variable.assign``, e.g. by ``load_state_dict``, needs no bump: a replay reads
    the current value of every parameter whose gradient the step publishes.)"""
    _generation[0] += 1


def generation() -> int:
    return _generation[0]


def host(fn: Callable[..., R], *tensors: Any) -> R:
    """``fn(*tensors)``; while a step is recorded, also kept to run at this point of every
    replay with that replay's tensors. ``fn`` must touch device data only through the
    tensors it is given (it may read them) and return tensors, numbers or lists of them."""
    r = ACTIVE.recorder
    if r is None:
        return fn(*tensors)
    return r.host(fn, tensors)


def published(var: Any, grad: Any) -> None:
    """``var.grad = grad``, remembered by a recording (the replay publishes its own)."""
    var.grad = grad
    r = ACTIVE.recorder
    if r is not None:
        r.published(var, grad)
