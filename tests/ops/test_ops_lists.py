"""What the hand-kept lists beside the op registry must say, beyond naming every op.

Whether each list names every op (``riftco.ops``' re-exports and ``__all__``, the packages'
``MODULES``, the bases of ``Backend`` and ``FusedBackend``, the device status table) is one
item of the new-op checklist, ``tests/ops/test_new_op_checklist.py``, which reports every
missing piece of every op at once. Here: the device status table's messages, and each
public function's documentation.
"""

from __future__ import annotations

import inspect
import pydoc
import re
from typing import Any

import numpy as np
import pytest
import riftco
from riftco import ops
from riftco.errors import DomainError
from riftco.ops.opunit import units

#: Public names of riftco.ops that are not op functions.
API = {"OpUnit", "Out", "register", "unit", "units", "is_native", "composite", "same_backend",
       "flush_deferred", "COMPARE_OPS"}  # fmt: skip


def _op_functions() -> dict[str, Any]:
    """Every public function of riftco.ops' op modules, by name."""
    return {n: getattr(ops, n) for n in ops.__all__ if n not in API}


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
