"""Results never share memory with their inputs: core checks by memory on every call, and
conformance writes a sentinel into every result and reads every input back.

Issue 30: core compared storage objects, so a backend whose ``copy_strided`` wrapped a
dense input's buffer in a new tensor, or returned a ``reshape`` of it (a new array object
over the same bytes), passed conformance; a later in-place write to the "copy" then
rewrote the source.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import riftco
from conformance_mutants import (
    AddScalarZeroReturnsReshape,
    Base,
    CopyStridedAliasesDenseInput,
    NegInPlaceReturnsView,
    ToNumpyReturnsBufferView,
)
from helpers import plugin_for
from riftco.conformance import cli
from riftco.errors import BackendContractError
from riftco.kernel_host.allocator import DeviceBuffer
from riftco.kernel_host.backend import KernelBackend
from riftco.tensor import Storage, Tensor, dense_strides

dispatch_module = importlib.import_module("riftco.ops.dispatch")
memory_module = importlib.import_module("riftco.ops.primitive.memory")
shares_memory = dispatch_module.shares_memory
F32 = np.dtype(np.float32)


class _Device:
    """A stand-in backend: ``same_allocation`` only when given one."""

    name, device_index = "fake", 0

    def __init__(self, same: Any = None) -> None:
        if same is not None:
            self.same_allocation = same


def _t(buf: Any, n: int, backend: Any = None) -> Tensor:
    return Tensor(backend or _Device(), Storage(buf, n), (n,), dense_strides((n,)), 0, F32)


def test_numpy_buffers_are_compared_by_address_range_not_by_object() -> None:
    arena = np.zeros(16, np.float32)
    x = _t(arena, 16)
    assert shares_memory(_t(arena, 16), [x])  # the same buffer in a new storage
    assert shares_memory(_t(arena.reshape(4, 4).reshape(-1), 16), [x])  # a new array object
    assert shares_memory(_t(arena[3:9], 6), [x])  # a slice of it
    assert shares_memory(_t(arena[6:10], 4), [_t(arena[:8], 8)])  # overlapping slices


def test_disjoint_pieces_of_one_allocation_and_unrelated_buffers_do_not_alias() -> None:
    arena = np.zeros(16, np.float32)
    assert not shares_memory(_t(arena[8:], 8), [_t(arena[:8], 8)])
    assert not shares_memory(_t(np.zeros(4, np.float32), 4), [_t(np.zeros(4, np.float32), 4)])
    empty = np.zeros(0, np.float32)
    assert not shares_memory(_t(empty, 0), [_t(np.zeros(0, np.float32), 0)])


def test_arrays_over_foreign_memory_are_seen_through_their_views() -> None:
    """``np.frombuffer`` arrays have a non-array base: their views still count."""
    raw = np.frombuffer(bytearray(64), dtype=np.float32)
    assert shares_memory(_t(raw[2:6], 4), [_t(raw, 16)])
    assert shares_memory(_t(raw, 16), [_t(raw[2:6], 4)])


def test_list_operands_are_searched_too() -> None:
    a, b = np.zeros(4, np.float32), np.zeros(4, np.float32)
    assert shares_memory(_t(b.reshape(2, 2).reshape(-1), 4), [[_t(a, 4), _t(b, 4)]])
    assert not shares_memory(_t(np.zeros(4, np.float32), 4), [[_t(a, 4), _t(b, 4)]])


class _Box:
    """An opaque device buffer: core cannot read its address."""

    def __init__(self, handle: int) -> None:
        self.handle = handle


def test_opaque_buffers_ask_the_backends_same_allocation_hook() -> None:
    calls: list[tuple[int, int]] = []

    def same(a: _Box, b: _Box) -> bool:
        calls.append((a.handle, b.handle))
        return a.handle == b.handle

    hooked = _Device(same)
    x = _t(_Box(7), 4, hooked)
    assert shares_memory(_t(_Box(7), 4, hooked), [x])
    assert not shares_memory(_t(_Box(8), 4, hooked), [x])
    assert calls == [(7, 7), (8, 7)]
    plain = _Device()  # no hook: only the very same buffer object is known to alias
    box = _Box(7)
    assert shares_memory(_t(box, 4, plain), [_t(box, 4, plain)])
    assert not shares_memory(_t(_Box(7), 4, plain), [_t(_Box(7), 4, plain)])


def test_kernel_backends_compare_device_buffers_by_the_runtime_buffer() -> None:
    raw, other = object(), object()
    same = KernelBackend.same_allocation
    assert same(None, DeviceBuffer(raw, 16, 256), DeviceBuffer(raw, 8, 256))
    assert not same(None, DeviceBuffer(raw, 16, 256), DeviceBuffer(other, 16, 256))


def test_the_contract_error_names_the_op_and_the_operand() -> None:
    backend = CopyStridedAliasesDenseInput()
    x = riftco.ops.upload(backend, np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(BackendContractError) as info:
        riftco.ops.copy_strided(x)
    msg = str(info.value)
    assert msg.startswith("[copy_strided] backend mutant:0 broke the result contract")
    assert "shares memory with operand 0 ('x')" in msg
    y = riftco.ops.upload(AddScalarZeroReturnsReshape(), np.ones(3, np.float32))
    with pytest.raises(BackendContractError, match=r"^\[add_scalar\] .*operand 0 \('x'\)"):
        riftco.ops.add_scalar(y, 0.0)


class FromNumpyWrapsTheArray(Base):
    def from_numpy(self, array: np.ndarray) -> Tensor:
        return self.wrap(array.reshape(-1), array.shape, array.dtype)


def test_host_transfers_must_copy() -> None:
    """``from_numpy``/``to_numpy`` over numpy buffers: the caller's array is no alias."""
    with pytest.raises(BackendContractError, match=r"^\[from_numpy\] .*over the caller's"):
        riftco.ops.upload(FromNumpyWrapsTheArray(), np.ones((2, 3), np.float32))
    x = riftco.ops.upload(ToNumpyReturnsBufferView(), np.ones((2, 3), np.float32))
    with pytest.raises(BackendContractError, match=r"^\[to_numpy\] .*tensor's own buffer"):
        x.numpy()


def _bad_cases(registry: Any, cls: type[Base], tmp_path: Path, ops: str) -> list[dict[str, Any]]:
    named = type(cls.__name__, (cls,), {"name": "mutant"})
    registry.register(plugin_for(named), name="mutant")
    out = tmp_path / "report.json"
    rc = cli.main(["mutant", "--ops", ops, "--max-examples", "0", "--json", str(out), "--quiet"])
    report = json.loads(out.read_text())
    bad = [c for d in report["devices"] for c in d["cases"] if c["status"] in ("fail", "error")]
    assert rc == 1 and bad, f"{cls.__name__} passed {ops}"
    return bad


@pytest.mark.parametrize(
    ("cls", "op", "problem"),
    [
        (CopyStridedAliasesDenseInput, "copy_strided", "shares memory with a result"),
        (AddScalarZeroReturnsReshape, "add_scalar", "shares memory with a result"),
        (NegInPlaceReturnsView, "neg", "wrote into its input"),
        (ToNumpyReturnsBufferView, "to_numpy", "shares memory with a result"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)
def test_conformance_catches_aliasing_without_cores_check(
    registry: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cls: type[Base], op: str,
    problem: str,
) -> None:  # fmt: skip
    """With core's check blinded (a buffer type it cannot read), the sentinel still sees
    each aliasing result, on the edge samples alone, at its op."""
    monkeypatch.setattr(dispatch_module, "shares_memory", lambda out, args: False)
    monkeypatch.setattr(memory_module, "_on_host", lambda buffer, array: False)
    bad = _bad_cases(registry, cls, tmp_path, f"{op}[*")
    assert {c["op"] for c in bad} == {op}
    assert all(problem in c["reason"] for c in bad), [c["reason"] for c in bad]


def test_every_op_passes_the_sentinel_check_on_the_reference(tmp_path: Path) -> None:
    """The composites too: no op (native or composite) returns a view of its input."""
    out = tmp_path / "report.json"
    rc = cli.main(["cpu", "--ops", "*[float32*", "--max-examples", "0", "--json", str(out),
                   "--quiet"])  # fmt: skip
    bad = [
        c for d in json.loads(out.read_text())["devices"] for c in d["cases"]
        if c["status"] in ("fail", "error")
    ]  # fmt: skip
    assert rc == 0 and bad == []
