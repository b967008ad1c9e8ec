"""elementwise.cl in half storage: float16 / bfloat16 tensors loaded to float32, computed,
rounded once when stored (the family's half programs, half.h's LOAD / STORE).

References from numpy: the inputs widened to float32 (exact), the op in float32 (float64
for the transcendental ones, whose float32 builtins may differ from numpy's in the last
bit), rounded once to the half. Exact where IEEE float32 arithmetic is exact or correctly
rounded on both sides; one half ulp where a builtin's float32 result may sit a float32 ulp
away from numpy's next to a half's rounding boundary (exp, log, tanh, pow, sqrt, rsqrt,
and div under fast math). Run as IEEE C, with fast math at group size 96, with the
bit-level conversions forced, and on the Metal stand-in. A planted fault (a store that
truncates instead of rounding) must fail the same checks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from half_helpers import half_backend, half_ulps
from riftco.dtypes import bfloat16 as BFLOAT16
from riftco.ieee import quiet
from riftco.kernel_host.sources import program_source

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
HALVES = [F16] + ([BFLOAT16] if BFLOAT16 is not None else [])
KINDS = ["ieee", "fast96", "bits-fast96", "metal"]

UNARY = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
         "rsqrt": lambda v: 1 / np.sqrt(v), "tanh": np.tanh}  # fmt: skip
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum}  # fmt: skip
COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
           "eq": np.equal, "ne": np.not_equal}  # fmt: skip
#: Ops whose float32 result is the correctly rounded one on every build (no builtin).
EXACT = {"neg", "abs", "add", "sub", "mul", "maximum", "minimum", "add_scalar", "mul_scalar"}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def _launch(kind: str, name: str, dtype: np.dtype, *arrays: np.ndarray, **kw: Any) -> np.ndarray:
    """The elementwise kernel ``name`` on ``arrays`` (``bits-*``: half.h's bit-level
    conversions forced), downloaded."""
    be = half_backend(kind)
    ts = [be.from_numpy(a) for a in arrays]
    out = be.empty(ts[0].shape, dtype)
    defines = {"RIFTCO_HALF_BITS": "1"} if kind.startswith("bits") else None
    n = ts[0].size
    ints = [n, *kw.get("ints", ())]
    be.launch("elementwise", name, dtype, n, out, *ts, ints=ints, floats=kw.get("floats", ()),
              defines=defines)  # fmt: skip
    return be.to_numpy(out)


def _inputs(dtype: np.dtype, seed: int) -> np.ndarray:
    """Every class of value: random normals over several scales, subnormals, zeros of both
    signs, the largest finite values, infinities and NaN."""
    rng = np.random.default_rng(seed)
    finfo_max = float(np.finfo(dtype).max) if dtype == F16 else 3.3895313892515355e38
    tiny = 2.0**-24 if dtype == F16 else 2.0**-133
    special = [0.0, -0.0, 1.0, -1.0, 0.5, finfo_max, -finfo_max, tiny, -tiny, 3 * tiny,
               np.inf, -np.inf, np.nan, 20.0, -20.0, 1e-3]  # fmt: skip
    body = rng.standard_normal(2000) * 10.0 ** rng.integers(-4, 4, 2000)
    with quiet():
        return np.concatenate([special, body]).astype(dtype)


def _check(name: str, got: np.ndarray, want: np.ndarray, exact: bool) -> None:
    assert got.dtype == want.dtype
    d = half_ulps(got, want)
    limit = 0 if exact else 1
    bad = np.flatnonzero(~(d <= limit))
    assert bad.size == 0, (
        f"{name} [{want.dtype.name}]: {bad.size} elements off by more than {limit} ulp, e.g. "
        f"got {got[bad[:4]]}, want {want[bad[:4]]}"
    )


def _reference(fn: Any, dtype: np.dtype, *arrays: np.ndarray, exact: bool) -> np.ndarray:
    wide = np.float32 if exact else np.float64
    with quiet():
        r = fn(*(a.astype(wide) for a in arrays))
        return np.asarray(r).astype(F32).astype(dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_unary(kind, dtype):
    x = _inputs(dtype, 1)
    for op, fn in UNARY.items():
        got = _launch(kind, f"unary_{op}", dtype, x)
        _check(op, got, _reference(fn, dtype, x, exact=op in EXACT), op in EXACT)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_binary_and_compare(kind, dtype):
    a, b = _inputs(dtype, 2), _inputs(dtype, 3)[::-1].copy()
    for op, fn in BINARY.items():
        exact = op in EXACT or (op == "div" and kind == "ieee")
        got = _launch(kind, f"binary_{op}", dtype, a, b)
        _check(op, got, _reference(fn, dtype, a, b, exact=True), exact)
    for op, fn in COMPARE.items():
        got = _launch(kind, f"cmp_{op}", dtype, a, b)
        _check(op, got, fn(a.astype(F32), b.astype(F32)).astype(dtype), True)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_scalars_where_and_bias(kind, dtype):
    """The scalar travels in float32 (the compute dtype), not rounded to the half first:
    1/3 as a half would give different products."""
    x = _inputs(dtype, 4)
    s = np.float32(1 / 3)
    got = _launch(kind, "scalar_mul", dtype, x, floats=[1 / 3])
    _check("mul_scalar", got, _reference(lambda v: v * s, dtype, x, exact=True), True)
    got = _launch(kind, "scalar_add", dtype, x, floats=[1 / 3])
    _check("add_scalar", got, _reference(lambda v: v + s, dtype, x, exact=True), True)
    got = _launch(kind, "scalar_pow", dtype, x, ints=[1, 3], floats=[3.0])
    _check("pow_scalar", got, _reference(lambda v: v**3, dtype, x, exact=False), False)
    cond = np.resize(np.array([0.0, -0.0, 1.0, np.nan], dtype=dtype), x.size)
    y = _inputs(dtype, 5)
    got = _launch(kind, "where_select", dtype, cond, x, y)
    want = np.where(np.isnan(cond.astype(F32)) | (cond.astype(F32) != 0), x, y)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))  # bits moved


def test_a_store_that_truncates_fails():
    """Must be able to fail: the float16 program with its STORE planted to truncate the
    float32 result (round toward zero) instead of rounding to nearest even."""
    be = half_backend("ieee")
    store = "#define STORE(p, i, v) vstore_half_rte((v), (i), (GLOBAL half*)(p))"
    src = program_source("elementwise", F16)
    assert store in src
    trunc = "riftco_narrow_f32_bits(RIFTCO_F32_BITS(v) & 0xffffe000u, 10, 15)"
    planted = src.replace(store, f"#define STORE(p, i, v) ((p)[i] = {trunc})")
    kernel = be.compile_source(planted, "planted.cl").kernel("binary_mul")
    x, y = _inputs(F16, 6), _inputs(F16, 7)
    tx, ty, out = be.from_numpy(x), be.from_numpy(y), be.empty((x.size,), F16)
    params = be.runtime.constant(np.int32([x.size]).tobytes())
    raw = [t.storage.buffer.raw for t in (out, tx, ty)]
    be.runtime.launch(kernel, x.size, [*raw, params])
    with pytest.raises(AssertionError, match="off by more than 0 ulp"):
        _check("mul", be.to_numpy(out), _reference(np.multiply, F16, x, y, exact=True), True)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_listed_ops_run_in_half_storage_through_core(dtype):
    """``low_precision_ops`` names the elementwise ops: core dispatches them to the half
    program (one launch each, no cast kernels), and widens an op it does not name (sum:
    cast in, the float32 reduction, cast out)."""
    import riftco
    import riftco.ops as ops

    x = _inputs(dtype, 8)[:64]
    a = riftco.tensor(x, dtype=dtype, device="opencl:0")
    be = a.backend
    assert {"add", "exp", "compare", "where"} <= be.low_precision_ops
    be.reset_transfer_stats()
    got = ops.add(a, a)
    assert be.transfer_stats()["launches"] == 1 and got.dtype == dtype
    _check("add", got.numpy(), _reference(np.add, dtype, x, x, exact=True), True)
    be.reset_transfer_stats()
    ops.sum(a, axes=(0,))
    assert be.transfer_stats()["launches"] >= 3  # widened: cast, reduce, cast
