"""float16 / bfloat16 in the shared kernels: casts (shaders/half.h), fill and copies.

Run on OpenCL as IEEE C, on OpenCL built with fast math (``-cl-fast-relaxed-math
-cl-finite-math-only``, as Metal compiles) at a group size of 96, on the Metal stand-in,
and with the bit-level conversions forced (``RIFTCO_HALF_BITS``: the code CUDA runs for
float16, and every dialect for bfloat16) in both builds. References: numpy's float16 and
ml_dtypes' bfloat16 conversions (both round once from float64, checked below on the values
that tell), plus the closed-form bits of the cases that tell one rounding from two.
Every narrowing rounds once to nearest even, keeps subnormals, overflows to +-inf and
keeps NaN a quiet NaN of the same sign; every widening is exact (NaN stays NaN).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from half_helpers import half_backend
from riftco.dtypes import bfloat16 as BFLOAT16
from riftco.ieee import quiet
from riftco.kernel_host.half_storage import cast_defines
from riftco.kernel_host.sources import c_type

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

F16 = np.dtype(np.float16)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
HALVES = [F16] + ([BFLOAT16] if BFLOAT16 is not None else [])
needs_bf16 = pytest.mark.skipif(BFLOAT16 is None, reason="ml_dtypes is not installed")
#: (name, mantissa bits) of each half; the quiet bit is the mantissa's top bit.
FORMATS = {F16: 10, **({BFLOAT16: 7} if BFLOAT16 is not None else {})}
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}

KINDS = ["ieee", "fast96", "bits-ieee", "bits-fast96", "metal"]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def _wides(be: Any) -> list[np.dtype]:
    return [F32] + ([F64] if F64 in be.dtypes else [])


def run_cast(kind: str, x: np.ndarray, dst: np.dtype, **extra: str) -> np.ndarray:
    """``x`` cast to ``dst`` on the backend ``kind``, through the backend's own ``cast``,
    or by launching cast.cl with the bit-level conversions forced (``bits-*``) or with
    ``extra`` defines (a planted fault)."""
    be = half_backend(kind)
    t = be.from_numpy(x)
    if not kind.startswith("bits") and not extra:
        return be.to_numpy(be.cast(t, dst))
    out = be.empty(t.shape, dst)
    defines = {"SRC": c_type(t.dtype), **cast_defines(t.dtype, dst), **extra}
    if kind.startswith("bits"):
        defines["RIFTCO_HALF_BITS"] = "1"
    be.launch("cast", "cast_copy", dst, t.size, out, t, ints=[t.size], defines=defines)
    return be.to_numpy(out)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(UINT[a.dtype.itemsize]).astype(np.uint64)


def _nan_mask(bits: np.ndarray, dtype: np.dtype) -> np.ndarray:
    mbits = FORMATS.get(dtype, {4: 23, 8: 52}.get(dtype.itemsize, 0))
    ebits = dtype.itemsize * 8 - 1 - mbits
    exp = (bits >> np.uint64(mbits)) & np.uint64((1 << ebits) - 1)
    man = bits & np.uint64((1 << mbits) - 1)
    return (exp == (1 << ebits) - 1) & (man != 0)


def mismatches(src: np.ndarray, got: np.ndarray, want: np.ndarray, narrowing: bool) -> list[str]:
    """Where ``got`` is not ``want`` bit for bit; a NaN ``want`` asks for a NaN of the same
    sign (and a quiet one when narrowing: what hardware conversions give)."""
    gb, wb = _bits(got), _bits(want)
    dtype = want.dtype
    top = np.uint64(1 << (dtype.itemsize * 8 - 1))
    wnan, gnan = _nan_mask(wb, dtype), _nan_mask(gb, dtype)
    mbits = FORMATS.get(dtype, {4: 23, 8: 52}.get(dtype.itemsize, 0))
    quiet_bit = (gb >> np.uint64(mbits - 1)) & np.uint64(1)
    nan_ok = gnan & ((gb & top) == (wb & top)) & ((quiet_bit == 1) | (not narrowing))
    ok = np.where(wnan, nan_ok, gb == wb)
    return [
        f"{src.dtype.name} {src[i]!r} (bits {_bits(src)[i]:#x}) -> {dtype.name}: got "
        f"{gb[i]:#06x}, want {wb[i]:#06x}"
        for i in np.flatnonzero(~ok)[:12]
    ]


def _f32(*words: int) -> np.ndarray:
    return np.array(words, dtype=np.uint32).view(np.float32)


#: float32 values that test rounding to float16: NaNs (quiet, signalling, both signs),
#: +-inf, +-0, ties at 1 (to even: down, up), just above a tie, the largest finite value
#: and the overflow boundary (65520 is the tie that rounds to inf), the smallest subnormals
#: (2^-24; 2^-25 is a tie to 0; 3 * 2^-25 a tie up to 2^-23), the subnormal/normal border,
#: float32 subnormals (to +-0) and float32's largest value.
HARD_F32_F16 = _f32(
    0x7FC12345, 0xFFC12345, 0x7F812345, 0xFF800001, 0x7F800000, 0xFF800000, 0x00000000,
    0x80000000, 0x3F801000, 0x3F803000, 0x3F801001, 0xBF803000, 0x477FE000, 0x477FEFFF,
    0x477FF000, 0xC77FF000, 0x33800000, 0x33000000, 0x33000001, 0x33C00000, 0xB3800000,
    0x38800000, 0x387FE000, 0x387FC000, 0x387FF000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF,
)  # fmt: skip
#: The same for bfloat16: ties at 1, its largest finite value (0x7f7f), float32's largest
#: (a tie past 0x7f7f: to inf), bfloat16 subnormals (float32 subnormals kept to 7 bits;
#: 0x00008000 is a tie to 0, 0x00018000 a tie up to 0x0002), NaNs, infinities, zeros.
HARD_F32_BF16 = _f32(
    0x7FC12345, 0xFFC12345, 0x7F812345, 0xFF800001, 0x7F800000, 0xFF800000, 0x00000000,
    0x80000000, 0x3F808000, 0x3F818000, 0x3F808001, 0xBF818000, 0x7F7F0000, 0x7F7F7FFF,
    0x7F7F8000, 0x7F7FFFFF, 0xFF7F8000, 0x00010000, 0x00008000, 0x00008001, 0x00018000,
    0x80010000, 0x007F0000, 0x007FFFFF, 0x00000001,
)  # fmt: skip
#: float64 values whose float32 rounding lands on a half's tie (or past its overflow
#: boundary): a cast that goes through float32 rounds them twice and gets them wrong.
#: (value, float16 bits, bfloat16 bits), the bits written from the definition.
DOUBLE_ROUNDING = [
    (1 + 2**-11 + 2**-40, 0x3C01, 0x3F80),  # f16: above the tie 1 + 2^-11: up
    (-(1 + 2**-11 + 2**-40), 0xBC01, 0xBF80),
    (1 + 2**-8 + 2**-40, 0x3C04, 0x3F81),  # bf16: above the tie 1 + 2^-8: up
    (65520.0 - 2**-30, 0x7BFF, 0x4780),  # f16: just under the overflow tie: 65504
    (2**-25 + 2**-60, 0x0001, 0x3300),  # f16: above half the smallest subnormal: 2^-24
    (2.0**-134 + 2.0**-170, 0x0000, 0x0001),  # bf16: above half its smallest subnormal
    (2.0**-134, 0x0000, 0x0000),  # bf16: exactly half its smallest subnormal: to 0
]
#: 2^-1074, 1e300, -1e-300, 1/3: float64 only, far out of range or inexact
EXTRA_F64 = [5e-324, 1e300, -1e300, -1e-300, 1 / 3, 0.1, 65504.0, 65519.999, float("nan")]


def _reference(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    with quiet():
        return x.astype(dst)


def _expected(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    """What a narrowing must give: the reference, with its NaNs quiet (numpy keeps a
    signalling NaN's pattern when narrowing to float16; hardware quiets it)."""
    out = _reference(x, dst)
    b = out.view(np.uint16)
    b[_nan_mask(b.astype(np.uint64), dst)] |= np.uint16(1 << (FORMATS[dst] - 1))
    return out


def test_references_round_once_from_float64():
    """numpy and ml_dtypes, the references below, round once: they agree with the bits
    written from the definition (else the kernel checks would trust a wrong oracle)."""
    x = np.array([v for v, _, _ in DOUBLE_ROUNDING])
    for dtype, column in zip(HALVES, (1, 2), strict=False):
        want = np.array([row[column] for row in DOUBLE_ROUNDING], dtype=np.uint16)
        assert _bits(_reference(x, dtype)).astype(np.uint16).tolist() == want.tolist()


def _random_f32(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    words = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    # half of them near the halves' ranges, where the rounding decisions are
    near = rng.uniform(-30, 20, n // 2)
    mant = rng.integers(0, 2**23, n // 2)
    words[: n // 2] = ((near.astype(np.int64) + 127) << 23 | mant).astype(np.uint32)
    words[: n // 4] |= np.uint32(0x80000000)
    return words.view(np.float32)


@pytest.mark.parametrize("dst", HALVES, ids=lambda d: d.name)
def test_narrowing_from_float32(kind, dst):
    hard = HARD_F32_F16 if dst == F16 else HARD_F32_BF16
    x = np.concatenate([hard, _random_f32(1 << 15, 1)])
    got = run_cast(kind, x, dst)
    assert got.dtype == dst
    assert mismatches(x, got, _reference(x, dst), narrowing=True) == []


@pytest.mark.parametrize("dst", HALVES, ids=lambda d: d.name)
def test_narrowing_from_float64_rounds_once(kind, dst):
    be = half_backend(kind)
    if F64 not in be.dtypes:
        pytest.skip(f"{be.name} declares no float64 here")
    rng = np.random.default_rng(2)
    # random doubles on either side of a half's ties: a tie plus or minus a few float32 ulps
    ties = _reference(_random_f32(1 << 12, 3), dst).astype(np.float64)
    steps = rng.choice([-1, 1], ties.size) * 2.0 ** rng.integers(-40, -9, ties.size)
    with quiet():  # the infinities and NaNs among the ties stay what they are
        nudged = ties * (1 + steps)
    x = np.concatenate([[v for v, _, _ in DOUBLE_ROUNDING], EXTRA_F64, nudged])
    got = run_cast(kind, x, dst)
    assert mismatches(x, got, _reference(x, dst), narrowing=True) == []


@pytest.mark.parametrize("src", HALVES, ids=lambda d: d.name)
def test_widening_is_exact_for_every_pattern(kind, src):
    """All 65,536 patterns: normals, subnormals, zeros, infinities, NaNs."""
    x = np.arange(1 << 16, dtype=np.uint16).view(src)
    for wide in _wides(half_backend(kind)):
        got = run_cast(kind, x, wide)
        assert mismatches(x, got, _reference(x, wide), narrowing=False) == [], wide.name


@needs_bf16
def test_half_to_half_rounds_once(kind):
    """float16 <-> bfloat16 through float32: exact widening, then one rounding."""
    for src, dst in ((F16, BFLOAT16), (BFLOAT16, F16)):
        x = np.arange(1 << 16, dtype=np.uint16).view(src)
        want = _reference(_reference(x, F32), dst)
        assert mismatches(x, run_cast(kind, x, dst), want, narrowing=True) == []


# -- the checks can fail -------------------------------------------------------------------------
def _truncate(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    """float32 -> bfloat16 by dropping the low bits (no rounding)."""
    return (x.view(np.uint32) >> 16).astype(np.uint16).view(dst)


def _flush(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    b = out.view(UINT[a.dtype.itemsize])
    mbits = FORMATS[a.dtype]
    sub = ((b >> mbits) & ((1 << (15 - mbits)) - 1)) == 0
    b[sub] &= 0x8000
    return out


def _unsign_nan(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    b = out.view(np.uint16)
    b[_nan_mask(b.astype(np.uint64), a.dtype)] &= 0x7FFF
    return out


def _no_negzero(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    b = out.view(np.uint16)
    b[b == 0x8000] = 0
    return out


def _saturate(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    b = out.view(np.uint16)
    mbits = FORMATS[a.dtype]
    inf = ((1 << (15 - mbits)) - 1) << mbits
    b[(b & 0x7FFF) == inf] -= 1  # largest finite instead of inf
    return out


FAULTS: dict[str, Callable[[np.ndarray, np.ndarray, np.dtype], np.ndarray]] = {
    "flushes subnormals": lambda x, good, dst: _flush(good),
    "loses a NaN's sign": lambda x, good, dst: _unsign_nan(good),
    "loses -0.0": lambda x, good, dst: _no_negzero(good),
    "saturates instead of inf": lambda x, good, dst: _saturate(good),
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("dst", HALVES, ids=lambda d: d.name)
def test_checker_catches_planted_faults(fault, dst):
    x = HARD_F32_F16 if dst == F16 else HARD_F32_BF16
    good = _expected(x, dst)
    assert mismatches(x, good, good, narrowing=True) == []
    assert mismatches(x, FAULTS[fault](x, good, dst), good, narrowing=True), fault


@needs_bf16
def test_checker_catches_truncation():
    x = HARD_F32_BF16
    assert mismatches(x, _truncate(x, BFLOAT16), _reference(x, BFLOAT16), narrowing=True)


def test_checker_catches_a_kernel_that_rounds_twice():
    """A planted fault in the kernel: float64 -> float16 through float32 (the float
    conversion applied to the double) fails exactly on the double-rounding values."""
    be = half_backend("ieee")
    if F64 not in be.dtypes:
        pytest.skip("the OpenCL device has no float64")
    x = np.array([v for v, _, _ in DOUBLE_ROUNDING])
    got = run_cast("ieee", x, F16, CAST_NARROW="riftco_f16_from_float")
    bad = mismatches(x, got, _reference(x, F16), narrowing=True)
    assert len(bad) >= 4, bad  # 1 + 2^-11 + 2^-40 (twice), 65520 - 2^-30, 2^-25 + 2^-60


# -- fill and copies ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_fill_rounds_the_value_once(kind, dtype):
    be = half_backend(kind)
    for value in [1 / 3, 1 + 2**-11 + 2**-40, 65520.0, -1e9, 2**-25 + 2**-60, -0.0, float("nan")]:
        x = be.empty((7,), dtype)
        be.fill(x, value)
        got = be.to_numpy(x)
        want = np.full(7, _reference(np.array([value]), dtype)[0])
        assert mismatches(np.full(7, value), got, want, narrowing=True) == [], value


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_copies_move_bits(kind, dtype):
    """Strided copies, concatenation and split move every pattern unchanged, NaN payloads
    included (a copy through a float would quiet or canonicalise them)."""
    be = half_backend(kind)
    bits = np.random.default_rng(4).permutation(1 << 16).astype(np.uint16)
    a = bits[: 256 * 200].reshape(256, 200).view(dtype)
    t = be.from_numpy(a)
    for view, want in [
        (t.permute(1, 0), a.T),
        (t[3:, 1::3], a[3:, 1::3]),
        (t.reshape(8, 32, 200).permute(2, 0, 1)[5], a.reshape(8, 32, 200).transpose(2, 0, 1)[5]),
    ]:
        got = be.to_numpy(be.copy_strided(view))
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    parts = be.split_last_axis(t, [50, 1, 149])
    for part, (lo, hi) in zip(parts, [(0, 50), (50, 51), (51, 200)], strict=True):
        got = be.to_numpy(part).view(np.uint16)
        np.testing.assert_array_equal(got, a[:, lo:hi].view(np.uint16))
    joined = be.to_numpy(be.concatenate_last_axis(parts[::-1]))
    want = np.concatenate([a[:, 51:], a[:, 50:51], a[:, :50]], axis=1)
    np.testing.assert_array_equal(joined.view(np.uint16), want.view(np.uint16))
