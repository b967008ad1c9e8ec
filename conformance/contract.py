"""Protocol and error-contract cases.

Protocol cases check what a backend declares: the protocol version, every required method,
devices, capabilities, memory statistics. Error cases feed malformed operands to
``riftco.ops`` with the backend wrapped in a *spy* that records every backend method call:
each must raise a riftco error whose message starts with ``[op]`` and the spy must have
seen no call at all (validation happens before dispatch).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import riftco
from riftco.backend import FUSED_OPS, PRIMITIVE_OPS, PROTOCOL_VERSION, Capabilities, DeviceInfo
from riftco.tensor import Tensor

from .results import CaseResult


# -- spy ----------------------------------------------------------------------------------------
class _SpyBase:
    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:  # name, dtypes, accepts_strided, ...
        return getattr(self._real, name)


def make_spy(backend: Any) -> Any:
    """A stand-in backend with the same native ops, recording calls before forwarding them."""

    def recorder(op: str) -> Callable[..., Any]:
        def method(self: _SpyBase, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(op)
            return getattr(self._real, op)(*args, **kwargs)

        return method

    ns = {
        op: recorder(op) for op in PRIMITIVE_OPS + FUSED_OPS if callable(getattr(backend, op, None))
    }
    return type(f"Spy{type(backend).__name__}", (_SpyBase,), ns)(backend)


def _on(spy: Any, array: np.ndarray) -> Tensor:
    """Upload through the real backend, then rehome the tensor on the spy (no spy call)."""
    t = spy._real.from_numpy(np.ascontiguousarray(array))
    return Tensor(spy, t.storage, t.shape, t.strides, t.offset, t.dtype)


# -- error cases ----------------------------------------------------------------------------------
def _error_cases(backend: Any) -> list[tuple[str, str, Callable[[Any, Any], Any]]]:
    """(name, op that must be named, thunk(spy, other_spy))."""
    f = np.float32 if np.dtype(np.float32) in backend.dtypes else np.float64
    idt = next((d for d in (np.int32, np.int64) if np.dtype(d) in backend.dtypes), None)
    other_float = next((d for d in (np.float64, np.float32) if np.dtype(d) != np.dtype(f)), None)

    def z(s: Any, *shape: int) -> Tensor:
        return _on(s, np.zeros(shape, dtype=f))

    ops = riftco.ops
    cases: list[tuple[str, str, Callable[[Any, Any], Any]]] = [
        ("add_shape_mismatch", "add", lambda s, o: ops.add(z(s, 3, 4), z(s, 4, 3))),
        ("mul_no_implicit_broadcast", "mul", lambda s, o: ops.mul(z(s, 3, 4), z(s, 1, 4))),
        ("matmul_inner_dims", "matmul", lambda s, o: ops.matmul(z(s, 2, 3), z(s, 4, 5))),
        (
            "matmul_transpose_b_dims",
            "matmul",
            lambda s, o: ops.matmul(z(s, 2, 3), z(s, 3, 5), transpose_b=True),
        ),
        ("matmul_batch_dims", "matmul", lambda s, o: ops.matmul(z(s, 2, 2, 3), z(s, 3, 3, 4))),
        ("matmul_rank_1", "matmul", lambda s, o: ops.matmul(z(s, 3), z(s, 3, 2))),
        ("sum_axis_out_of_range", "sum", lambda s, o: ops.sum(z(s, 2, 3), 2)),
        ("split_sizes", "split_last_axis", lambda s, o: ops.split_last_axis(z(s, 2, 5), [2, 2])),
        (
            "concatenate_leading",
            "concatenate_last_axis",
            lambda s, o: ops.concatenate_last_axis([z(s, 2, 3), z(s, 3, 3)]),
        ),
        (
            "softmax_backward_shapes",
            "softmax_backward",
            lambda s, o: ops.softmax_backward(z(s, 2, 3), z(s, 2, 4)),
        ),
        (
            "layer_norm_gamma_shape",
            "layer_norm",
            lambda s, o: ops.layer_norm(z(s, 2, 4), z(s, 3), z(s, 4)),
        ),
        (
            "attention_qkv_shapes",
            "attention",
            lambda s, o: ops.attention(z(s, 1, 1, 4, 2), z(s, 1, 1, 5, 2), z(s, 1, 1, 4, 2), 1.0),
        ),
        (
            "attention_rank",
            "attention",
            lambda s, o: ops.attention(z(s, 1, 4, 2), z(s, 1, 4, 2), z(s, 1, 4, 2), 1.0),
        ),
        (
            "flash_backward_lse_shape",
            "flash_attention_backward",
            lambda s, o: ops.flash_attention_backward(*(z(s, 1, 1, 3, 2),) * 5, z(s, 1, 3), 1.0),
        ),
        (
            "adam_update_shapes",
            "adam_update",
            lambda s, o: ops.adam_update(z(s, 3), z(s, 4), z(s, 3), z(s, 3), 0.1),
        ),
        ("mixed_devices_add", "add", lambda s, o: ops.add(z(s, 2, 2), z(o, 2, 2))),
        ("mixed_devices_matmul", "matmul", lambda s, o: ops.matmul(z(s, 2, 2), z(o, 2, 2))),
        (
            "mixed_devices_layer_norm",
            "layer_norm",
            lambda s, o: ops.layer_norm(z(s, 2, 4), z(o, 4), z(s, 4)),
        ),
        ("float_ids_embedding", "embedding", lambda s, o: ops.embedding(z(s, 5, 3), z(s, 4))),
        (
            "float_targets_cross_entropy",
            "cross_entropy",
            lambda s, o: ops.cross_entropy(z(s, 4, 5), z(s, 4)),
        ),
    ]
    if idt is not None:

        def ids(s: Any, *shape: int) -> Tensor:
            return _on(s, np.zeros(shape, dtype=idt))

        cases += [
            ("exp_of_index_dtype", "exp", lambda s, o: ops.exp(ids(s, 3))),
            ("matmul_index_dtype", "matmul", lambda s, o: ops.matmul(ids(s, 2, 2), ids(s, 2, 2))),
            (
                "cross_entropy_targets_shape",
                "cross_entropy",
                lambda s, o: ops.cross_entropy(z(s, 4, 5), ids(s, 3)),
            ),
            ("embedding_table_rank", "embedding", lambda s, o: ops.embedding(z(s, 5), ids(s, 2))),
        ]
    if other_float is not None and np.dtype(other_float) in backend.dtypes:
        cases.append(
            (
                "add_mixed_float_dtypes",
                "add",
                lambda s, o: ops.add(z(s, 2), _on(s, np.zeros(2, dtype=other_float))),
            )
        )
    for d in (np.float64, np.int64):
        if np.dtype(d) not in backend.dtypes:
            cases.append(
                (
                    f"cast_to_unsupported_{np.dtype(d).name}",
                    "cast",
                    lambda s, o, d=d: ops.cast(z(s, 2), d),
                )
            )
            break
    return cases


def error_cases(backend: Any) -> list[tuple[str, str, Callable[[], CaseResult]]]:
    """(case id, op, run) for every error-contract case this backend's dtypes allow."""
    return [
        (f"errors/{name}", op, lambda n=name, o=op, t=thunk: _run_error(backend, n, o, t))
        for name, op, thunk in _error_cases(backend)
    ]


def _run_error(backend: Any, name: str, op: str, thunk: Callable[[Any, Any], Any]) -> CaseResult:
    res = CaseResult(f"errors/{name}", op, "errors")
    spy, other = make_spy(backend), make_spy(backend)
    start = time.perf_counter()
    try:
        thunk(spy, other)
    except riftco.RiftcoError as exc:
        msg = str(exc)
        if not msg.startswith(f"[{op}]"):
            res.status, res.reason = "fail", f"message does not start with '[{op}]': {msg}"
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


# -- protocol cases -------------------------------------------------------------------------------
def _signature_problems(cls: type) -> list[str]:
    """Required methods whose positional arity differs from the protocol's."""
    problems = []
    for op in PRIMITIVE_OPS + FUSED_OPS:
        mine, ref = getattr(cls, op, None), getattr(riftco.Backend, op, None)
        if mine is None or ref is None or not callable(mine):
            continue
        try:
            a, b = inspect.signature(mine), inspect.signature(ref)
        except (TypeError, ValueError):
            continue
        if any(p.kind is p.VAR_POSITIONAL for p in a.parameters.values()):
            continue
        if len(a.parameters) != len(b.parameters):
            problems.append(f"{op}{a} (protocol: {op}{b})")
    return problems


def protocol_results(cls: type, backend: Any, device: DeviceInfo | None) -> list[CaseResult]:
    checks: list[tuple[str, Callable[[], str]]] = []

    def version() -> str:
        v = tuple(getattr(cls, "protocol_version", ()))
        if len(v) != 2 or v[0] != PROTOCOL_VERSION[0] or v[1] > PROTOCOL_VERSION[1]:
            return f"declares protocol {v}; riftco implements {PROTOCOL_VERSION}"
        return ""

    def methods() -> str:
        missing = riftco.backend.missing_primitives(cls)
        bad = _signature_problems(cls)
        return "; ".join(
            filter(
                None,
                [
                    missing and f"missing: {', '.join(missing)}",
                    bad and f"wrong arity: {', '.join(bad)}",
                ],
            )
        )

    def devices() -> str:
        devs = cls.devices()
        if not devs or not all(isinstance(d, DeviceInfo) for d in devs):
            return f"devices() returned {devs!r}; expected a non-empty list of DeviceInfo"
        if [d.index for d in devs] != list(range(len(devs))):
            return f"device indices {[d.index for d in devs]} are not 0..{len(devs) - 1}"
        return ""

    def capabilities() -> str:
        caps = cls.capabilities()
        if not isinstance(caps, Capabilities):
            return f"capabilities() returned {type(caps).__name__}, not Capabilities"
        extra = set(caps.fused) - set(FUSED_OPS)
        floats = {d for d in caps.dtypes if np.dtype(d).kind == "f"}
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

    checks = [
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
        except Exception as exc:
            problem = f"raised {type(exc).__name__}: {exc}"
        if problem:
            res.status, res.reason = "fail", problem
        res.time_s = time.perf_counter() - start
        out.append(res)
    return out
