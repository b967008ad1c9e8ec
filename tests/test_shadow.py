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
    assert riftco.ops.dispatch.validator is None and not shadow.is_enabled()


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
    riftco.ops.softmax(x)  # native on this backend: one checked call
    riftco.ops.composite("softmax")(x)  # max, sub, exp, sum, div: each one checked
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


# -- faults shadow validation must catch (issue 12: each of these went unnoticed) ---------------
class FlashDqDoubled(CPUBackend):
    name = "shadow_flash"

    def flash_attention_backward(self, *args: Any) -> Any:
        dq, dk, dv = super().flash_attention_backward(*args)
        return self.result(2 * view(dq)), dk, dv


class LayerNormDgammaOff(CPUBackend):
    name = "shadow_ln"

    def layer_norm_backward(self, *args: Any) -> Any:
        dx, dgamma, dbeta = super().layer_norm_backward(*args)
        return dx, self.result(1.01 * view(dgamma)), dbeta


class CopyScaled(CPUBackend):
    name = "shadow_copy"

    def copy_strided(self, x: Any) -> Any:
        return self.result(1.5 * view(x))


class LayerNormMissingOutput(CPUBackend):
    name = "shadow_missing"

    def layer_norm(self, *args: Any) -> Any:
        return super().layer_norm(*args)[:2]


class AdamWrongLr(CPUBackend):
    name = "shadow_adam"

    def adam_update(self, param: Any, grad: Any, m: Any, v: Any, lr: float, *rest: Any) -> None:
        super().adam_update(param, grad, m, v, 2 * lr, *rest)


def _t(b: Any, *shape: int, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    return b.from_numpy(rng.standard_normal(shape).astype(np.float32))


def _shadowed(registry: Any, cls: type) -> Any:
    backend = add_backend(registry, cls)
    shadow.enable()
    return backend


@pytest.mark.parametrize(
    ("cls", "op", "run", "what"),
    [
        (FlashDqDoubled, "flash_attention_backward",
         lambda b: riftco.ops.flash_attention_backward(
             _t(b, 1, 2, 5, 3), *(_t(b, 1, 2, 5, 3, seed=s) for s in (1, 2, 3)),
             *riftco.ops.flash_attention(*(_t(b, 1, 2, 5, 3, seed=s) for s in (1, 2, 3)), 0.5),
             0.5), "dq"),
        (LayerNormDgammaOff, "layer_norm_backward",
         lambda b: riftco.ops.layer_norm_backward(
             _t(b, 6, 8), _t(b, 6, 8, seed=1), _t(b, 8, seed=2),
             *riftco.ops.layer_norm(_t(b, 6, 8, seed=1), _t(b, 8, seed=2), _t(b, 8, seed=3))[1:]),
         "dgamma"),
        (CopyScaled, "copy_strided", lambda b: riftco.ops.copy_strided(_t(b, 4, 6).T), "out"),
        (LayerNormMissingOutput, "layer_norm",
         lambda b: riftco.ops.layer_norm(_t(b, 3, 4), _t(b, 4, seed=1), _t(b, 4, seed=2)),
         "outputs"),
        (AdamWrongLr, "adam_update",
         lambda b: riftco.ops.adam_update(_t(b, 5), _t(b, 5, seed=1), _t(b, 5, seed=2),
                                          b.from_numpy(np.ones(5, np.float32)), 0.1, step=3),
         "param"),
    ],
    ids=["flash_dq_doubled", "ln_dgamma_1pct", "copy_strided_x1.5", "missing_output", "adam_lr"],
)  # fmt: skip
def test_shadow_catches_real_faults(registry: Any, cls: type, op: str, run: Any, what: str) -> None:
    backend = _shadowed(registry, cls)
    try:
        with pytest.raises(riftco.ValidationError) as info:
            run(backend)
    finally:
        shadow.disable()
    assert str(info.value).startswith(f"[{op}] shadow validation"), str(info.value)
    assert what in str(info.value)


def test_wrong_output_dtype_is_caught_at_the_op(registry: Any) -> None:
    class GeluFloat64(CPUBackend):
        name = "shadow_dtype"

        def gelu(self, x: Any, approximate: str) -> Any:
            return self.result(view(x).astype(np.float64))

    backend = add_backend(registry, GeluFloat64)
    with pytest.raises(riftco.BackendContractError, match=r"^\[gelu\].*float64.*float32"):
        riftco.ops.gelu(_t(backend, 3))
