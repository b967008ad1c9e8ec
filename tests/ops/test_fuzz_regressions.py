"""What tests/ops/test_fuzz_ops.py found, one test each, so a regression fails by name.

Each used to escape as a raw Python or numpy exception (TypeError, ValueError,
AttributeError, ZeroDivisionError, OverflowError, RuntimeWarning under ``-W error``), to
be silently misread (``2.5`` truncated to a size of 2, ``"no"`` read as True, ``None`` as
float64), or to leave an in-place op half written. Expected values come from the rules in
notes/SEMANTICS.md and IEEE arithmetic, computed here by hand.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import riftco
from riftco import ops
from riftco.backends.cpu.backend import CPUBackend
from riftco.errors import DomainError, DTypeError, RiftcoError, ShapeError, UnknownBackendError

F32 = np.dtype(np.float32)


def _backend(name: str) -> Any:
    try:
        entry = riftco.get_registry().entry(name)
    except UnknownBackendError:  # cffi_example: `make test` installs it, plain pytest may not
        pytest.skip(f"{name} is not installed (pip install ./examples/cffi_backend)")
    if not entry.available:
        pytest.skip(f"{name} is unavailable: {entry.reason}")
    return riftco.device(name).backend


@pytest.fixture
def cpu() -> Any:
    return riftco.device("cpu").backend


def _f(be: Any, *shape: int) -> Any:
    return ops.upload(be, np.ones(shape, F32))


# -- arguments of the wrong type are riftco errors, never silently converted ---------------------
@pytest.mark.parametrize(
    ("shape", "error"),
    [(None, DTypeError), (3, DTypeError), ((2.5, 2), DTypeError), (("3",), DTypeError),
     ((True, 2), DTypeError), ((2, -1), ShapeError)],
)  # fmt: skip
def test_allocate_shape_must_be_a_tuple_of_non_negative_ints(cpu: Any, shape: Any, error: Any):
    with pytest.raises(error, match=r"^\[allocate\]"):
        ops.allocate(cpu, shape, F32)
    assert ops.allocate(cpu, [2, np.int64(3)], F32).shape == (2, 3)


def test_dtype_none_is_not_read_as_float64(cpu: Any) -> None:
    with pytest.raises(DTypeError, match=r"^\[allocate\] dtype None is not a dtype"):
        ops.allocate(cpu, (2,), None)
    with pytest.raises(DTypeError, match=r"^\[allocate\]"):
        ops.allocate(cpu, (2,), "f4,f4")


def test_backend_arguments_must_be_backends(cpu: Any) -> None:
    with pytest.raises(DTypeError, match=r"^\[allocate\] expects a backend instance"):
        ops.allocate("cpu", (2,), F32)
    with pytest.raises(DTypeError, match=r"^\[from_numpy\] expects a backend instance"):
        ops.upload("cpu", np.zeros(2, F32))
    with pytest.raises(DTypeError, match=r"^\[from_numpy\] expects a host array; got a Tensor"):
        ops.upload(cpu, _f(cpu, 2))
    with pytest.raises(DTypeError, match=r"^\[from_numpy\] cannot read list"):
        ops.upload(cpu, [[1.0, 2.0], [3.0]])


def test_layout_ops_check_their_sequences(cpu: Any) -> None:
    x = _f(cpu, 2, 4)
    with pytest.raises(DTypeError, match=r"^\[concatenate_last_axis\] expects a list or tuple"):
        ops.concatenate_last_axis(None)  # type: ignore[arg-type]
    with pytest.raises(DTypeError, match=r"^\[concatenate_last_axis\]"):
        ops.concatenate_last_axis(x)  # type: ignore[arg-type]
    with pytest.raises(DTypeError, match=r"^\[split_last_axis\] every size must be an int"):
        ops.split_last_axis(x, [1.5, 2.5])  # used to truncate to [1, 2], then fail on the sum
    with pytest.raises(DTypeError, match=r"^\[split_last_axis\] every size must be an int"):
        ops.split_last_axis(x, [_f(cpu), 3])
    with pytest.raises(DTypeError, match=r"^\[split_last_axis\] sizes must be a list"):
        ops.split_last_axis(x, 4)  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", ["no", 1, None, 0.0, "tensor"])
def test_boolean_flags_must_be_bools(cpu: Any, flag: Any) -> None:
    """``bool("no")`` is True and ``bool(0-d tensor)`` raised TypeError from ``len()``."""
    if flag == "tensor":
        flag = ops.upload(cpu, np.array(np.float32(1.0)))
    q = _f(cpu, 1, 2, 3, 4)
    qkv = _f(cpu, 1, 3, 12)
    calls = {
        "matmul": lambda: ops.matmul(_f(cpu, 2, 2), _f(cpu, 2, 2), flag),
        "sum": lambda: ops.sum(_f(cpu, 2, 2), 0, flag),
        "attention": lambda: ops.attention(q, q, q, 0.5, flag),
        "flash_attention": lambda: ops.flash_attention(q, q, q, 0.5, flag),
        "flash_attention_backward": lambda: ops.flash_attention_backward(
            q, q, q, q, q, _f(cpu, 1, 2, 3), 0.5, flag
        ),
        "attention_qkv": lambda: ops.attention_qkv(qkv, 2, 0.5, flag),
    }
    for op, call in calls.items():
        with pytest.raises(DTypeError, match=rf"^\[{op}\] .* must be a bool"):
            call()
    assert ops.matmul(_f(cpu, 2, 2), _f(cpu, 2, 2), np.bool_(True)).shape == (2, 2)


@pytest.mark.parametrize("axes", ["x", 1.5, True, [0, "1"], (None,)])
def test_reduction_axes_must_be_ints(cpu: Any, axes: Any) -> None:
    with pytest.raises(DTypeError, match=r"^\[sum\]"):
        ops.sum(_f(cpu, 2, 3), axes)


def test_tensor_views_refuse_non_int_dims_and_slice_bounds(cpu: Any) -> None:
    x = _f(cpu, 2, 3)
    with pytest.raises(DTypeError, match=r"^\[reshape\] every dim must be an int"):
        x.reshape(3.0, 2)
    with pytest.raises(DTypeError, match=r"^\[transpose\] every axis must be an int"):
        x.transpose("a", 0)  # type: ignore[arg-type]
    with pytest.raises(DTypeError, match=r"^\[broadcast_to\]"):
        x.broadcast_to(None, 2, 3)  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match=r"^\[getitem\] slice bounds must be ints"):
        x[1.5:]  # noqa: B018
    assert x.reshape(np.int64(3), 2).shape == (3, 2)


# -- fill converts by cast's rule on every backend ----------------------------------------------
_BACKENDS = ["cpu", "native", "cffi_example", "opencl"]


@pytest.mark.parametrize("name", _BACKENDS)
def test_fill_of_integer_tensors_follows_the_cast_rule(name: str) -> None:
    """SEMANTICS: truncate toward zero, saturate, NaN -> 0 (used to raise ValueError or
    OverflowError from numpy or cffi)."""
    be = _backend(name)
    values = [np.nan, np.inf, -np.inf, 2.7, -2.7, 1e30, -1e30, 2**40, 7]
    for dtype in sorted(d.name for d in be.dtypes if np.dtype(d).kind == "i"):
        info = np.iinfo(dtype)
        want = [0, info.max, info.min, 2, -2, info.max, info.min, min(2**40, info.max), 7]
        for value, expected in zip(values, want, strict=True):
            x = ops.allocate(be, (3,), dtype)
            ops.fill_(x, value)
            np.testing.assert_array_equal(x.numpy(), np.full(3, expected, dtype), str(value))


def test_fill_rounds_to_float32_and_refuses_non_numbers(cpu: Any) -> None:
    x = ops.allocate(cpu, (2,), F32)
    ops.fill_(x, 1e308)
    np.testing.assert_array_equal(x.numpy(), [np.inf, np.inf])
    with pytest.raises(DTypeError, match=r"^\[full_like\] value must be a Python number"):
        ops.full_like(x, "1")  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match=r"^\[full_like\] dims must be >= 0"):
        ops.full_like(x, 1.0, (2, -2))


# -- AdamW: hyperparameters every backend can compute with --------------------------------------
class Composite(CPUBackend):
    """CPU primitives, core's AdamW composite (as cffi_example or any plugin without it)."""

    name = "composite-adam"
    adam_update = None  # type: ignore[assignment]


@pytest.mark.parametrize("backend", ["cpu", "composite"])
@pytest.mark.parametrize(
    "hyper",
    [{"beta1": 1.0}, {"beta2": 1.0}, {"beta1": 1e308, "step": 2}, {"beta2": -0.5},
     {"lr": float("nan")}, {"eps": float("inf")}, {"weight_decay": -1.0}, {"lr": -1e-3},
     {"step": 2**63}],
)  # fmt: skip
def test_adam_refuses_hyperparameters_outside_its_domain(backend: str, hyper: dict) -> None:
    """beta1 = 1 raised ZeroDivisionError in the composite, 1e308 ** 2 OverflowError on the
    host; both now a DomainError before anything is written."""
    be = riftco.device("cpu").backend if backend == "cpu" else Composite()
    p, g, m, v = (ops.upload(be, np.full(4, x, F32)) for x in (1.0, 0.5, 0.1, 0.2))
    kwargs = {"lr": 0.1, **hyper}
    with pytest.raises(DomainError, match=r"^\[adam_update\] needs finite lr >= 0"):
        ops.adam_update(p, g, m, v, **kwargs)
    for t, x in zip((p, m, v), (1.0, 0.1, 0.2), strict=True):
        np.testing.assert_array_equal(t.numpy(), np.full(4, x, F32))
        assert t.version == 0
    with pytest.raises(ShapeError, match=r"^\[adam_update\] step counts from 1"):
        ops.adam_update(p, g, m, v, 0.1, step=True)


# -- IEEE results without warnings (``-W error`` is on in this suite) ---------------------------
@pytest.mark.parametrize("name", ["cpu", "native"])
def test_numpy_backends_give_ieee_results_without_warnings(name: str) -> None:
    """numpy's RuntimeWarnings became exceptions half way through ops; a user's
    ``np.seterr(all="raise")`` made them FloatingPointErrors. Neither may reach riftco."""
    be = _backend(name)
    big = ops.upload(be, np.array([3e38, -3e38, np.inf, 0.0], F32))
    inf = ops.upload(be, np.array([np.inf, np.inf, np.inf, 0.0], F32))
    with np.errstate(all="raise"):
        np.testing.assert_array_equal(ops.add(big, big).numpy(), [np.inf, -np.inf, np.inf, 0])
        np.testing.assert_array_equal(ops.sub(inf, inf).numpy(), [np.nan, np.nan, np.nan, 0.0])
        np.testing.assert_array_equal(ops.mul(big, inf).numpy()[:3], [np.inf, -np.inf, np.inf])
        zero_inf = ops.mul(
            ops.upload(be, np.zeros(1, F32)), ops.upload(be, np.full(1, np.inf, F32))
        )
        assert np.isnan(zero_inf.numpy()).all()
        np.testing.assert_array_equal(ops.exp(ops.mul_scalar(big, 1.0)).numpy()[:2], [np.inf, 0])
        np.testing.assert_array_equal(ops.add_scalar(big, 1e308).numpy()[:2], [np.inf, np.inf])
        np.testing.assert_array_equal(ops.pow_scalar(big, 2.0).numpy()[:2], [np.inf, np.inf])
        tiny = ops.upload(be, np.full(4, 1e-30, F32))
        np.testing.assert_array_equal(ops.div(big, tiny).numpy()[:3], [np.inf, -np.inf, np.inf])
        assert np.isnan(ops.sum(ops.upload(be, np.array([np.inf, -np.inf], F32))).numpy())
        m = ops.upload(be, np.full((2, 2), 3e38, F32))
        np.testing.assert_array_equal(ops.matmul(m, m).numpy(), np.full((2, 2), np.inf, F32))
        y = ops.softmax(ops.upload(be, np.array([[np.inf, 1.0], [1e38, -1e38]], F32))).numpy()
        assert np.isnan(y[0]).all() and (y[1] == [1.0, 0.0]).all()


def test_cpu_gelu_of_a_0d_tensor(cpu: Any) -> None:
    """The exact (erf) form got a numpy scalar from 0-d arithmetic: AttributeError."""
    import math

    x = ops.upload(cpu, np.array(np.float32(0.5)))
    want = 0.25 * (1.0 + math.erf(0.5 / math.sqrt(2.0)))
    assert ops.gelu(x, "none").numpy() == pytest.approx(want, rel=1e-6)
    dwant = 0.5 * (1.0 + math.erf(0.5 / math.sqrt(2.0))) + 0.5 * math.exp(-0.125) / math.sqrt(
        2.0 * math.pi
    )
    assert ops.gelu_backward(x, x, "none").numpy() == pytest.approx(0.5 * dwant, rel=1e-6)


def test_kernel_parameter_overflowing_float32_is_inf_without_a_warning() -> None:
    rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="pyopencl import failed")
    if not rt.enumerate_devices()[0]:
        pytest.skip("no usable OpenCL device")
    from riftco.backends.metal import standin
    from riftco.backends.metal.backend import MetalBackend

    be = MetalBackend(0, mc_module=standin)  # float32 only: 1e308 cannot be kept
    x = ops.upload(be, np.array([1.0, -1.0], F32))
    np.testing.assert_array_equal(ops.mul_scalar(x, 1e308).numpy(), [np.inf, -np.inf])


def test_every_error_above_is_a_riftco_error() -> None:
    for cls in (DomainError, DTypeError, ShapeError):
        assert issubclass(cls, RiftcoError)


def test_quiet_silences_numpy_and_restores_the_callers_error_state() -> None:
    from riftco import ieee

    big = np.array([3e38], F32)
    for make in (ieee.quiet, ieee._errstate):  # the fast path and its fallback
        with np.errstate(all="raise"):
            with make():
                assert np.isinf(big * big).all()
                with make():  # nested
                    assert np.isnan(big * 0 * np.inf).all()
                assert np.isinf(big + big).all()
            with pytest.raises(FloatingPointError):
                big * big  # noqa: B018
            with pytest.raises(ZeroDivisionError), make():
                raise ZeroDivisionError  # an exception inside still restores the state
            with pytest.raises(FloatingPointError):
                big * big  # noqa: B018
