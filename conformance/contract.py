"""Protocol, error-contract and domain cases, all read from the op units.

Protocol cases check what a backend declares: the protocol version, every required method
and the arity of every method it defines (fused ones included) against the op unit's
typed signature, devices, capabilities, memory statistics. Error cases feed each unit's
malformed calls to ``riftco.ops`` with the backend wrapped in a *spy* that records every
backend method call: each must raise a riftco error whose message starts with ``[op]``, and
the spy must have seen no call at all (validation happens before dispatch). Domain cases
feed out-of-range ids: a ``DomainError`` naming the op must come at the call or at the
next sync point, and the backend must work normally afterwards.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import riftco
from riftco.backend import PROTOCOL_VERSION, Capabilities, DeviceInfo
from riftco.dtypes import is_float
from riftco.ops.opunit import OpUnit, units
from riftco.ops.samples import ErrorSample
from riftco.tensor import Tensor

from .results import CaseResult
from .unwritten import unwritten


# -- spy ----------------------------------------------------------------------------------------
class _SpyBase:
    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:  # name, dtypes, accepts_strided, ...
        return getattr(self._real, name)


def make_spy(backend: Any) -> Any:
    """A stand-in backend with the same methods, recording calls before forwarding them."""

    def recorder(op: str) -> Callable[..., Any]:
        def method(self: _SpyBase, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(op)
            return getattr(self._real, op)(*args, **kwargs)

        return method

    ns = {u.name: recorder(u.name) for u in units() if callable(getattr(backend, u.name, None))}
    return type(f"Spy{type(backend).__name__}", (_SpyBase,), ns)(backend)


def _on(spy: Any, array: np.ndarray) -> Tensor:
    """Upload through the real backend, then rehome the tensor on the spy (no spy call)."""
    t = spy._real.from_numpy(np.array(array, order="C"))  # keeps 0-d arrays 0-d
    return Tensor(spy, t.storage, t.shape, t.strides, t.offset, t.dtype)


class SpyInputs:
    """``ErrorInputs`` for a spied backend (see ``riftco.ops.samples``)."""

    def __init__(self, spy: Any, other: Any) -> None:
        self.backend, self._other = spy, other
        dts = spy._real.dtypes
        self.float_dtype = np.dtype(np.float32 if np.dtype(np.float32) in dts else np.float64)
        self._index = next((np.dtype(d) for d in (np.int32, np.int64) if np.dtype(d) in dts), None)
        others = [np.dtype(d) for d in (np.float64, np.float32) if np.dtype(d) != self.float_dtype]
        self._other_float = next((d for d in others if d in dts), None)
        missing = [np.dtype(d) for d in (np.float64, np.int64, np.float32, np.int32)]
        self._unsupported = next((d for d in missing if d not in dts), None)

    def available(self) -> set[str]:
        have = set()
        if self._index is not None:
            have.add("index")
        if self._other_float is not None:
            have.add("other_float")
        if self._unsupported is not None:
            have.add("unsupported")
        return have

    def f(self, *shape: int) -> Tensor:
        return _on(self.backend, np.zeros(shape, dtype=self.float_dtype))

    def i(self, *shape: int) -> Tensor:
        assert self._index is not None
        return _on(self.backend, np.zeros(shape, dtype=self._index))

    def index_values(self, values: Any) -> Tensor:
        assert self._index is not None
        return _on(self.backend, np.asarray(values, dtype=self._index))

    def other_device(self, *shape: int) -> Tensor:
        return _on(self._other, np.zeros(shape, dtype=self.float_dtype))

    def other_float(self, *shape: int) -> Tensor:
        assert self._other_float is not None
        return _on(self.backend, np.zeros(shape, dtype=self._other_float))

    def unsupported_dtype(self) -> np.dtype:
        assert self._unsupported is not None
        return self._unsupported


def error_cases(backend: Any) -> list[tuple[str, str, Callable[[], CaseResult]]]:
    """(case id, op, run) for every error sample of every unit this backend can express."""
    have = SpyInputs(make_spy(backend), make_spy(backend)).available()
    return _cases(backend, "errors", have, _run_error)


def _cases(
    backend: Any, kind: str, have: set[str], run: Callable[[Any, ErrorSample], CaseResult]
) -> list[tuple[str, str, Callable[[], CaseResult]]]:
    """(``kind/name``, op, run) for each sample in every unit's ``kind`` ("errors" or
    "domain") whose needs the backend's inputs ``have``."""
    out: list[tuple[str, str, Callable[[], CaseResult]]] = []
    for u in units():
        for sample in getattr(u, kind):
            if sample.needs <= have:
                out.append((f"{kind}/{sample.name}", u.name, partial(run, backend, sample)))
    return out


def _run_error(backend: Any, sample: ErrorSample) -> CaseResult:
    res = CaseResult(f"errors/{sample.name}", sample.op, "errors")
    spy, other = make_spy(backend), make_spy(backend)
    start = time.perf_counter()
    try:
        sample.run(SpyInputs(spy, other))
    except riftco.RiftcoError as exc:
        msg = str(exc)
        if not msg.startswith(f"[{sample.op}]"):
            res.status, res.reason = "fail", f"message does not start with '[{sample.op}]': {msg}"
    except Exception as exc:
        res.status = "fail"
        res.reason = f"raised {type(exc).__name__} (not a riftco error): {exc}"
    else:
        res.status, res.reason = "fail", "no error was raised"
    calls = spy.calls + other.calls
    if calls:
        res.status = "fail"
        res.reason = (res.reason + "; " if res.reason else "") + (
            f"backend was called before the error: {', '.join(calls)}"
        )
    res.time_s = time.perf_counter() - start
    return res


# -- domain cases ----------------------------------------------------------------------------------
class _DeviceInputs(SpyInputs):
    """Like ``SpyInputs`` but on the real backend: domain checks may need kernels to run."""

    def __init__(self, backend: Any) -> None:
        super().__init__(make_spy(backend), make_spy(backend))
        self.backend = backend

    def f(self, *shape: int) -> Tensor:
        return riftco.ops.upload(self.backend, np.zeros(shape, dtype=self.float_dtype))

    def index_values(self, values: Any) -> Tensor:
        assert self._index is not None
        return riftco.ops.upload(self.backend, np.asarray(values, dtype=self._index))


def domain_cases(backend: Any) -> list[tuple[str, str, Callable[[], CaseResult]]]:
    return _cases(backend, "domain", _DeviceInputs(backend).available(), _run_domain)


def _sync(backend: Any, result: Any) -> None:
    for t in result if isinstance(result, (tuple, list)) else (result,):
        if isinstance(t, Tensor):
            riftco.ops.download(t)
    backend.synchronize()
    riftco.ops.flush_deferred(backend)


def _run_domain(backend: Any, sample: ErrorSample) -> CaseResult:
    res = CaseResult(f"domain/{sample.name}", sample.op, "domain")
    start = time.perf_counter()
    raised: BaseException | None = None
    try:
        _sync(backend, sample.run(_DeviceInputs(backend)))
    except BaseException as exc:  # noqa: BLE001 - anything else is this case's failure
        if isinstance(exc, riftco.errors.DeviceLostError):
            raise
        raised = exc
    if raised is None:
        res.status, res.reason = "fail", "no DomainError at the call or at the next sync point"
    elif not isinstance(raised, riftco.DomainError):
        res.status = "fail"
        res.reason = f"raised {type(raised).__name__}, expected DomainError: {raised}"
    elif not str(raised).startswith(f"[{sample.op}]"):
        res.status, res.reason = "fail", f"message does not start with '[{sample.op}]': {raised}"
    else:  # the error must not stick: the next ordinary op works and reads back right
        try:
            x = riftco.ops.upload(backend, np.arange(4, dtype=_DeviceInputs(backend).float_dtype))
            got = riftco.ops.download(riftco.ops.add(x, x))
            if not np.array_equal(got, 2 * np.arange(4)):
                res.status, res.reason = "fail", f"after the DomainError, x + x gave {got}"
        except BaseException as exc:  # noqa: BLE001
            res.status = "fail"
            res.reason = (
                f"after the DomainError the backend still fails: {type(exc).__name__}: {exc}"
            )
    res.time_s = time.perf_counter() - start
    return res


# -- protocol cases -------------------------------------------------------------------------------
def _positional(fn: Any) -> tuple[int, int] | None:
    """(required, total) positional parameters; None when it takes ``*args``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = [p for p in sig.parameters.values() if p.kind in kinds]
    return sum(1 for p in params if p.default is p.empty), len(params)


def signature_problems(cls: type) -> list[str]:
    """Methods that cannot be called with their op unit's arguments (extra parameters with
    defaults are fine; a missing or an extra required one is not)."""
    problems = []
    for u in units():
        mine = getattr(cls, u.name, None)
        if mine is None or not callable(mine):
            continue
        a, b = _positional(mine), _positional(u.method)
        if a is not None and b is not None and (a[0] != b[1] or a[1] < b[1]):
            want = inspect.signature(u.method)
            problems.append(f"{u.name}{inspect.signature(mine)} (protocol: {u.name}{want})")
    return problems


def protocol_results(cls: type, backend: Any, device: DeviceInfo | None) -> list[CaseResult]:
    def version() -> str:
        v = tuple(getattr(cls, "protocol_version", ()) or ())
        if len(v) != 2 or v[0] != PROTOCOL_VERSION[0] or v[1] > PROTOCOL_VERSION[1]:
            return f"declares protocol {v}; riftco implements {PROTOCOL_VERSION}"
        return ""

    def methods() -> str:
        problems = []
        if missing := riftco.backend.missing_primitives(cls):
            problems.append(f"missing: {', '.join(missing)}")
        if bad := signature_problems(cls):
            problems.append(f"wrong arity: {', '.join(bad)}")
        required, optional = unwritten(cls)
        if required:
            problems.append(f"not implemented yet (only raise NotImplementedError): "
                            f"{', '.join(required)}")  # fmt: skip
        if optional:
            problems.append("optional methods that only raise NotImplementedError (delete "
                            f"them to run core's composites): {', '.join(optional)}")  # fmt: skip
        return "; ".join(problems)

    def devices() -> str:
        devs = cls.devices()  # type: ignore[attr-defined]
        if not devs or not all(isinstance(d, DeviceInfo) for d in devs):
            return f"devices() returned {devs!r}; expected a non-empty list of DeviceInfo"
        if [d.index for d in devs] != list(range(len(devs))):
            return f"device indices {[d.index for d in devs]} are not 0..{len(devs) - 1}"
        return ""

    def capabilities() -> str:
        caps = cls.capabilities()  # type: ignore[attr-defined]
        if not isinstance(caps, Capabilities):
            return f"capabilities() returned {type(caps).__name__}, not Capabilities"
        extra = set(caps.fused) - {u.name for u in units("fused")}
        floats = {d for d in caps.dtypes if is_float(d)}
        if extra or not floats:
            return f"unknown fused ops {sorted(extra)} or no float dtype in {caps.dtypes}"
        return ""

    def memory() -> str:
        stats = backend.memory_stats()
        keys = {"allocated_bytes", "peak_bytes"}
        if not keys <= set(stats) or any(int(stats[k]) < 0 for k in keys):
            return f"memory_stats() returned {stats!r}; needs non-negative {sorted(keys)}"
        backend.synchronize()
        return ""

    checks: list[tuple[str, Callable[[], str]]] = [
        ("protocol_version", version),
        ("required_methods", methods),
        ("devices", devices),
        ("capabilities", capabilities),
        ("memory_stats", memory),
    ]
    out = []
    for name, fn in checks:
        res = CaseResult(f"protocol/{name}", name, "protocol")
        start = time.perf_counter()
        try:
            problem = fn()
        except riftco.errors.DeviceLostError:
            raise
        except Exception as exc:
            problem = f"raised {type(exc).__name__}: {exc}"
        if problem:
            res.status, res.reason = "fail", problem
        res.time_s = time.perf_counter() - start
        out.append(res)
    return out


def numeric_units() -> list[OpUnit]:
    """Units with samples, in protocol order."""
    return [u for u in units() if u.samples is not None]
