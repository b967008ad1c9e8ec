"""Shadow validation: a live op that diverges from the CPU reference raises, naming the op."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import riftco
from helpers import add_backend
from riftco import shadow
from riftco.backends.cpu.backend import CPUBackend, view


class OffByOneGelu(CPUBackend):
    """A native gelu that returns x (so it is wrong away from large positive x)."""

    name = "shadow_subject"

    def gelu(self, x: Any, approximate: str) -> Any:
        return self.result(view(x).copy(), x.dtype)


@pytest.fixture
def subject(registry: Any) -> Iterator[Any]:
    yield add_backend(registry, OffByOneGelu)
    shadow.disable()


def test_off_by_default_and_free() -> None:
    assert os.environ.get("RIFTCO_VALIDATE") is None
    assert riftco.tensor_ops.validator is None and not shadow.is_enabled()


def test_divergence_raises_naming_op_shapes_and_error(subject: Any) -> None:
    x = subject.from_numpy(np.linspace(-3, 1, 12, dtype=np.float32).reshape(3, 4))
    riftco.ops.gelu(x)  # off: the wrong result goes unnoticed
    validator = shadow.enable()
    y = riftco.ops.add(x, x)  # a correct op passes through
    assert validator.checked == 1 and np.allclose(y.numpy(), 2 * x.numpy())
    with pytest.raises(riftco.ValidationError) as info:
        riftco.ops.gelu(x)
    msg = str(info.value)
    assert msg.startswith("[gelu] shadow validation")
    assert "shadow_subject:0" in msg and "(3, 4)" in msg and "float32" in msg
    assert "max abs err" in msg and "elements beyond tolerance" in msg


def test_composites_are_shadowed_op_by_op(subject: Any) -> None:
    validator = shadow.enable()
    x = subject.from_numpy(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32))
    riftco.fused_ops.softmax(x)  # native on this backend: one checked call
    riftco.composites.softmax(x)  # max, sub, exp, sum, div: each one checked
    assert validator.checked == 6


def test_cpu_itself_is_not_shadowed() -> None:
    validator = shadow.enable()
    try:
        x = riftco.tensor(np.ones((2, 2), dtype=np.float32), device="cpu")
        riftco.ops.exp(x)
        assert validator.checked == 0
    finally:
        shadow.disable()


def test_environment_variable_enables_at_import() -> None:
    code = "import riftco; from riftco import shadow; print(shadow.is_enabled())"
    env = {**os.environ, "RIFTCO_VALIDATE": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr
    env["RIFTCO_VALIDATE"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
