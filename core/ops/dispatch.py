"""The one dispatch path every op takes, and the result contract checked on every call.

An op module validates its operands (``checks``), works out what the result must look
like (an :class:`Out` per output) and calls :func:`dispatch`, which

1. runs the backend's own method when its class defines one, else the unit's composite;
   float16/bfloat16 operands of an op the backend does not run in low precision itself
   run in float32 on the same backend, cast in and out (``widen``);
2. hands a backend that does not declare ``accepts_strided`` dense operands only (a view
   is materialised by that backend's ``copy_strided`` first);
3. lets the shadow validator (``RIFTCO_VALIDATE=cpu``) look before and after;
4. checks the result's metadata: output count, that each is a Tensor of this backend with
   the promised shape and dtype, and that its memory overlaps no operand's where a new
   tensor is promised (by memory, not by object: see :func:`shares_memory`). A float64 result
   from a float32 op fails here, at once, naming the op and the backend;
5. turns a ``MemoryError`` raised inside the call (numpy's, or the kernel host layer's
   translation of a runtime's) into ``OutOfMemoryError`` naming the op, the operands and
   the bytes its outputs need.

The contract check reads a few attributes per output, no values: cheap enough for every
call, and it is what turns a backend bug into an error at the op that has it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from ..dtypes import LOW_PRECISION as _LOW
from ..errors import BackendContractError, OutOfMemoryError
from ..tensor import Tensor
from . import widen
from .capture_hooks import ACTIVE
from .opunit import OpUnit, unit

if TYPE_CHECKING:
    from ..backend import Backend


class Out(NamedTuple):
    """What one output must be: its shape and dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype


#: ``Out`` for one result, a tuple for a fixed number, a list for a variable number
#: (``split_last_axis``), ``None`` for an in-place op that returns nothing. A Tensor means
#: "one result shaped and typed like this operand" (elementwise ops: no ``Out`` to build).
Expect = Out | Tensor | tuple[Out, ...] | list[Out] | None


class Validator(Protocol):
    """Shadow validation hook (``riftco.shadow``): sees every native call."""

    def before(self, unit: OpUnit, backend: Any, args: Sequence[Any]) -> Any: ...
    def after(
        self, unit: OpUnit, backend: Any, args: Sequence[Any], out: Any, state: Any
    ) -> None: ...


#: Installed by ``riftco.shadow``; ``None`` keeps dispatch at one global read.
validator: Validator | None = None


def _prep(a: Any) -> Any:
    """A view becomes a dense copy made by its own backend (``Tensor.contiguous`` is the
    ``copy_strided`` op, dispatched and checked like every other)."""
    if type(a) is Tensor:
        return a if a.is_dense else a.contiguous()
    if type(a) is list and a and type(a[0]) is Tensor:
        return [x if x.is_dense else x.contiguous() for x in a]
    return a


def dispatch(
    unit: OpUnit, backend: Backend, args: tuple[Any, ...], expect: Expect, prep: bool = True
) -> Any:
    """Run ``unit`` on validated ``args`` (natively or composite) and check the result.

    ``prep=False`` passes views through untouched (``copy_strided`` and ``to_numpy``
    exist to read them)."""
    r = ACTIVE.recorder
    if r is not None:  # riftco.capture: see each backend a recorded step reaches
        r.see(backend)
    fn = None if _forced and unit.name in _forced else getattr(backend, unit.name, None)
    if _LOW and not _LOW.isdisjoint(backend.dtypes) and widen.needed(unit, backend, args, fn):
        return widen.run(unit, backend, args, expect, _again(prep), _cast, Out)
    try:  # free when nothing raises (zero-cost exception handling)
        if fn is None:
            if unit.composite is None:  # a required method: plugins refuse such backends
                raise BackendContractError(
                    f"[{unit.name}] backend {backend.name}:{backend.device_index} does not "
                    "implement this required protocol method"
                )
            out = unit.composite(*args)
        else:
            if prep and not backend.accepts_strided:
                args = tuple([_prep(a) for a in args])
            v = validator
            if v is None:
                out = fn(*args)
            else:
                state = v.before(unit, backend, args)
                out = fn(*args)
                v.after(unit, backend, args, out, state)
    except MemoryError as exc:  # numpy's _ArrayMemoryError; a kernel host layer's OOM error
        raise out_of_memory(unit, backend, args, expect, exc) from exc
    if type(expect) is Tensor:  # the elementwise fast path of check_result, inline
        if (
            type(out) is Tensor
            and out.backend is backend
            and out.shape == expect.shape
            and out.dtype == expect.dtype
            and not shares_memory(out, args)
        ):
            return out
        expect = Out(expect.shape, expect.dtype)
    check_result(unit, backend, args, out, expect)
    return out


#: Ops whose backend method dispatch passes over for the composite (conformance checks the
#: composite of an op a backend has natively through the same path users take).
_forced: set[str] = set()


@contextmanager
def composite_forced(name: str) -> Iterator[None]:
    """Run ``name``'s composite even where the backend defines the op (not thread-safe:
    for conformance, which runs one case at a time)."""
    _forced.add(name)
    try:
        yield
    finally:
        _forced.discard(name)


def composite_of(unit: OpUnit, function: Any) -> Any:
    """``function`` (``unit``'s public function) with the composite forced: validated
    operands, the float32 widening of half operands, the result contract, as for any call."""

    def run(*args: Any, **kwargs: Any) -> Any:
        with composite_forced(unit.name):
            return function(*args, **kwargs)

    return run


def _cast(x: Tensor, dtype: np.dtype) -> Tensor:
    """``riftco.ops.cast`` for widening (operands already validated: no checks again)."""
    return dispatch(unit("cast"), x.backend, (x, dtype), Out(x.shape, dtype))


def _again(prep: bool) -> Any:
    return lambda unit, backend, args, expect: dispatch(unit, backend, args, expect, prep)


def out_of_memory(
    unit: OpUnit, backend: Any, args: Sequence[Any], expect: Expect, exc: BaseException
) -> OutOfMemoryError:
    """The error for an allocation that failed inside ``unit``'s backend call or composite:
    the op, the device, what the outputs needed, the operands, and the runtime's words.

    An allocation cannot be checked before the call (a backend allocates scratch and a
    composite intermediates), so this is raised from the failure; in-place ops keep their
    tensors unchanged (they allocate before they write, see ``assign_many_``)."""
    if isinstance(expect, Tensor):
        expect = Out(expect.shape, expect.dtype)
    outs = [] if expect is None else [expect] if isinstance(expect, Out) else list(expect)
    need = sum(math.prod(o.shape) * o.dtype.itemsize for o in outs)
    names = _names(unit, len(outs)) if outs else []
    wanted = ", ".join(f"{n} {o.shape} {o.dtype.name}" for n, o in zip(names, outs, strict=True))
    what = f"its outputs ({wanted}) need {need:,} bytes" if outs else "it works in place"
    ops = []
    for a in args:
        if type(a) is Tensor:
            ops.append(f"{a.shape} {a.dtype.name}")
        elif type(a) is list and a and type(a[0]) is Tensor:
            ops.append("[" + ", ".join(f"{x.shape} {x.dtype.name}" for x in a) + "]")
    detail = str(exc).strip() or "no detail"
    return OutOfMemoryError(
        f"[{unit.name}] backend {_who(backend)} ran out of memory: {what}; operands "
        f"{', '.join(ops) or '-'} ({type(exc).__name__}: {detail})"
    )


def check_result(unit: OpUnit, backend: Any, args: Sequence[Any], out: Any, expect: Expect) -> None:
    """Raise :class:`BackendContractError` when ``out`` breaks the op's metadata contract."""
    if isinstance(expect, Tensor):
        expect = Out(expect.shape, expect.dtype)
    if isinstance(expect, Out):
        if (
            type(out) is Tensor
            and out.backend is backend
            and out.dtype == expect.dtype
            and out.shape == expect.shape
            and not shares_memory(out, args)
        ):
            return
        raise BackendContractError(_describe(unit, backend, 0, out, expect, args))
    if expect is None:
        if out is not None:
            raise BackendContractError(
                f"[{unit.name}] backend {_who(backend)} returned {type(out).__name__}; the op "
                "works in place and returns None"
            )
        return
    outs = list(out) if isinstance(out, (tuple, list)) else None
    if outs is None or len(outs) != len(expect):
        got = f"{len(outs)} outputs" if outs is not None else type(out).__name__
        raise BackendContractError(
            f"[{unit.name}] backend {_who(backend)} returned {got}; the op promises "
            f"{len(expect)} ({', '.join(_names(unit, len(expect)))})"
        )
    for i, (o, e) in enumerate(zip(outs, expect, strict=True)):
        if not (
            type(o) is Tensor
            and o.backend is backend
            and o.dtype == e.dtype
            and o.shape == e.shape
            and not shares_memory(o, args)
        ):
            raise BackendContractError(_describe(unit, backend, i, o, e, args))


def shares_memory(out: Tensor, args: Sequence[Any]) -> bool:
    """True when ``out``'s memory is, or overlaps, an operand's.

    Compared by memory, not by object: the same storage, the same buffer object, numpy
    buffers whose address ranges overlap (a ``reshape`` of an input's buffer is a new
    array object over the same bytes), or, for other buffer types, the backend's
    ``same_allocation`` hook. Cheap enough for every call (~0.1 us for a binary op):
    numpy points a view's ``base`` at the array owning its memory, so unrelated buffers
    are told apart by their owners before any address is read."""
    storage = out.storage
    buf = storage.buffer
    owner = None
    if type(buf) is _ndarray:
        base = buf.base
        owner = base if type(base) is _ndarray else buf
    for a in args:
        if type(a) is Tensor:
            s = a.storage
            if s is storage:
                return True
            other = s.buffer
            if owner is not None and type(other) is _ndarray:
                b = other.base
                if (b if type(b) is _ndarray else other) is owner and _may_share(buf, other):
                    return True
            elif other is buf or _same_allocation(out.backend, buf, other):
                return True
        elif type(a) is list and a and shares_memory(out, a):
            return True
    return False


_ndarray = np.ndarray
_may_share = np.may_share_memory  # address bounds only: exact for dense buffers


def _same_allocation(backend: Any, x: Any, y: Any) -> bool:
    """The backend's answer for buffers core cannot read (device handles); no hook: no."""
    same = getattr(backend, "same_allocation", None)
    return same is not None and bool(same(x, y))


def _who(backend: Any) -> str:
    return f"{getattr(backend, 'name', '?')}:{getattr(backend, 'device_index', '?')}"


def _names(unit: OpUnit, n: int) -> list[str]:
    names = list(unit.outputs)
    return [names[i] if i < len(names) else f"{names[-1]}[{i}]" for i in range(n)]


def _describe(
    unit: OpUnit, backend: Any, i: int, out: Any, expect: Out, args: Sequence[Any]
) -> str:
    name = _names(unit, i + 1)[i]
    head = f"[{unit.name}] backend {_who(backend)} broke the result contract: output {name!r} "
    want = f"a {expect.dtype.name} tensor of shape {expect.shape} on {_who(backend)}"
    if type(out) is not Tensor:
        return head + f"is a {type(out).__name__}; expected {want}"
    if out.backend is not backend:
        return head + f"lives on {_who(out.backend)}; expected {want}"
    if out.dtype != expect.dtype:
        ins = ", ".join(a.dtype.name for a in args if type(a) is Tensor)
        return head + f"has dtype {out.dtype.name} for inputs of dtype {ins}; expected {want}"
    if out.shape != expect.shape:
        return head + f"has shape {out.shape}; expected {want}"
    pos = next((j for j, a in enumerate(args) if shares_memory(out, [a])), None)
    return head + (
        f"shares memory with operand {_operand(unit, pos)}; expected a new tensor (a result "
        "that aliases an input lets a later in-place write to one change the other)"
    )


def _operand(unit: OpUnit, i: int | None) -> str:
    """``i`` and the protocol method's name for it: ``1 ('b')``."""
    names = list(inspect.signature(unit.method).parameters)[1:]
    return f"{i} ({names[i]!r})" if i is not None and i < len(names) else str(i)
