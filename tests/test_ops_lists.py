"""The lists kept by hand beside the op registry agree with it.

Some lists cannot be derived at run time without hiding them from type checkers and
readers: ``riftco.ops``' re-exports and ``__all__`` (mypy and IDEs read the imports), the
packages' ``MODULES`` (the protocol order), the protocol bases of ``Backend`` and
``FusedBackend`` (a Protocol's bases must be static) and the device status table of the
kernel host layer (its order is the shaders' op numbers). Each test here fails, naming the
fix, as soon as one of them disagrees with ``riftco.ops.opunit``'s registry.
"""

from __future__ import annotations

import inspect
import pkgutil
import pydoc
import re
import sys
from typing import Any

import numpy as np
import pytest
import riftco
from riftco import ops
from riftco.backend import Backend, FusedBackend, Identity
from riftco.errors import DomainError
from riftco.ops import fused, primitive
from riftco.ops.opunit import OpUnit, units

#: Public names of riftco.ops that are not op functions.
API = {"OpUnit", "Out", "register", "unit", "units", "is_native", "composite", "same_backend",
       "flush_deferred", "COMPARE_OPS"}  # fmt: skip


def _op_functions() -> dict[str, Any]:
    """Every public function of riftco.ops' op modules, by name."""
    return {n: getattr(ops, n) for n in ops.__all__ if n not in API}


def test_every_unit_function_is_exported_under_its_name() -> None:
    for u in units():
        if u.function is None:
            continue
        name = u.function.__name__
        assert name in ops.__all__, f"add {name} ({u.name}) to riftco.ops.__all__"
        assert getattr(ops, name) is u.function, f"import {name} in riftco/ops/__init__.py"


def test_all_names_only_ops_and_the_api() -> None:
    assert len(ops.__all__) == len(set(ops.__all__))
    unit_functions = {u.function for u in units() if u.function is not None}
    for name, fn in _op_functions().items():
        module = getattr(fn, "__module__", "")
        assert module.startswith(("riftco.ops.primitive.", "riftco.ops.fused.")), name
        helper = fn not in unit_functions  # mean, contiguous, full_like, ...: built on units
        assert helper or fn.__name__ == name, f"{name} is exported under another name"
    for name in API:
        assert hasattr(ops, name), name


@pytest.mark.parametrize("package", [primitive, fused], ids=["primitive", "fused"])
def test_package_modules_list_every_op_module_in_registration_order(package: Any) -> None:
    found = {m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")}
    assert set(package.MODULES) == found, f"list every module in {package.__name__}.MODULES"
    kind = ("fused",) if package is fused else ("memory", "primitive")
    order: list[str] = []
    for u in units():
        short = u.method.__module__.rpartition(".")[2]
        if u.kind in kind and short not in order:
            order.append(short)
    assert order == list(package.MODULES)


def _methods_class(unit: OpUnit) -> type:
    owner = unit.method.__qualname__.rpartition(".")[0]
    return getattr(sys.modules[unit.method.__module__], owner)


@pytest.mark.parametrize("protocol,fused_kind", [(Backend, False), (FusedBackend, True)])
def test_protocol_bases_are_the_units_methods_classes(protocol: type, fused_kind: bool) -> None:
    want = {_methods_class(u) for u in units() if u.fused == fused_kind}
    got = [b for b in protocol.__bases__ if b.__name__.endswith("Methods")]
    names = sorted(c.__name__ for c in want)
    assert set(got) == want and len(got) == len(want), f"{protocol.__name__}'s bases: {names}"
    others = set(protocol.__bases__) - set(got)
    assert {b.__name__ for b in others} <= {"Identity", "Protocol", "Generic"}, others
    assert (Identity in protocol.__bases__) is not fused_kind


class _HostInputs:
    """The ``ErrorInputs`` a domain sample needs, on the cpu backend."""

    float_dtype = np.dtype(np.float32)

    def __init__(self) -> None:
        self.backend = riftco.device("cpu").backend

    def f(self, *shape: int) -> riftco.Tensor:
        return ops.upload(self.backend, np.zeros(shape, np.float32))

    def i(self, *shape: int) -> riftco.Tensor:
        return ops.upload(self.backend, np.zeros(shape, np.int32))

    def index_values(self, values: Any) -> riftco.Tensor:
        return ops.upload(self.backend, np.asarray(values, np.int32))


def _device_error(op: str, high: int) -> str:
    """The message the device status buffer raises for a bad id of ``op`` below ``high``."""
    from riftco.kernel_host.status import SLOTS, STATUS_OPS, WORDS, DeviceStatus

    words = np.zeros(WORDS, np.int32)

    def upload(buf: Any, array: np.ndarray) -> None:
        buf[...] = array

    status = DeviceStatus(lambda n: np.zeros(n // 4, np.int32), upload,
                          lambda buf, n: buf[: n // 4].copy().view(np.uint8))  # fmt: skip
    buf, slot = status.buffer(op, high)
    k = STATUS_OPS.index(op) * SLOTS + slot
    words[:] = buf
    words[0] = 1 << k
    words[1 + 2 * k], words[2 + 2 * k] = high, high  # what a kernel records for id == V
    buf[...] = words
    with pytest.raises(DomainError) as err:
        status.check()
    return str(err.value)


def test_device_status_table_is_the_index_taking_units() -> None:
    """The kernel host layer's status table lists exactly the units with domain samples,
    and its deferred error names each op's ids and valid range as the host check does."""
    from riftco.kernel_host.status import STATUS_OPS

    index_taking = [u for u in units() if u.domain]
    assert {u.name for u in index_taking} == set(STATUS_OPS), "core/kernel_host/status.py"
    for u in index_taking:
        with pytest.raises(DomainError) as err:
            u.domain[0].run(_HostInputs())
        host = str(err.value)
        m = re.match(r"^(\[\w+\] .+ must lie in \[-?\d+, (\d+)\))", host)
        assert m, host
        assert _device_error(u.name, int(m.group(2))).startswith(m.group(1) + ";"), u.name


@pytest.mark.parametrize("name", sorted(set(ops.__all__) - API))
def test_every_public_op_function_documents_its_semantics(name: str) -> None:
    fn = getattr(ops, name)
    doc = inspect.getdoc(fn) or ""
    assert doc.strip(), f"riftco.ops.{name} has no docstring"
    for u in units():
        if u.function is fn:  # the protocol method's specification, carried over
            spec = inspect.cleandoc(u.method.__doc__ or "")
            assert spec and spec in doc, f"riftco.ops.{name} lacks {u.name}'s specification"
            shown = pydoc.render_doc(fn, renderer=pydoc.plaintext)  # what help() prints
            assert spec.splitlines()[0] in shown


def test_a_function_keeps_its_own_docstring_before_the_spec() -> None:
    own = inspect.getdoc(ops.cast) or ""
    assert own.startswith("``x`` converted to ``dtype``")
    assert "Specification (protocol method ``cast``)" in own
    assert (inspect.getdoc(ops.layer_norm) or "").startswith("``(y, mean, rstd)``")
