"""The native backend's float16/bfloat16 storage conversions (kernels_half.c), F16C and
portable paths alike, against independent references: exact rational rounding
(``fractions``) on hand-picked hard values (ties, the overflow boundary, subnormals,
values that round twice through float32), and numpy's / ml_dtypes' own conversions on
every 2-byte pattern and on a million random bit patterns.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from helpers import native_backend_module

native_mod = native_backend_module()
ml_dtypes = pytest.importorskip("ml_dtypes")

F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
#: (stored significand bits, smallest normal exponent, largest exponent) of each format
FORMAT = {F16: (10, -14, 15), BF16: (7, -126, 127)}


def _cpu_has_f16c() -> bool:
    try:
        return " f16c" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.fixture(params=["f16c", "portable"], scope="module")
def backend(request):
    """A native backend on each conversion path (``RIFTCO_NATIVE_HALF`` chooses)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RIFTCO_NATIVE_HALF", "auto" if request.param == "f16c" else "portable")
    try:
        b = native_mod.NativeBackend()
    finally:
        mp.undo()
    if request.param == "f16c":
        if not _cpu_has_f16c():
            pytest.skip("this CPU has no F16C: only the portable path exists here")
        assert b._f16c, "the CPU has F16C (/proc/cpuinfo) but the backend does not use it"
    else:
        assert not b._f16c
    return b


def convert(b, src: np.ndarray, dtype) -> np.ndarray:
    out = np.empty(src.size, dtype=dtype)
    b.convert(np.ascontiguousarray(src).reshape(-1), out)
    return out


def u16(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16)


def f32(pattern: int) -> float:
    """The float32 with bit pattern ``pattern``, as a Python float (exact)."""
    return float(np.array([pattern], dtype=np.uint32).view(np.float32)[0])


def round_exact(value: float, dtype: np.dtype) -> float:
    """``value`` rounded once to nearest even in the format of ``dtype``, by exact rational
    arithmetic (subnormals kept, overflow to inf); returned as a float64 (exact)."""
    if math.isinf(value) or value == 0:
        return value
    bits, emin, emax = FORMAT[dtype]
    a = abs(Fraction(value))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum = Fraction(2) ** (max(e, emin) - bits)
    n, rem = divmod(a, quantum)
    if rem > quantum / 2 or (rem == quantum / 2 and n % 2 == 1):
        n += 1
    r = n * quantum
    if r >= Fraction(2) ** (emax + 1):
        return math.copysign(math.inf, value)
    return math.copysign(float(r), value)


#: Values where a one-step rounding is easy to get wrong (float32-representable).
HARD_F32 = [
    0.0, -0.0, 1.0, -1.0, math.inf, -math.inf,
    1 + 2**-11, 1 + 3 * 2**-11, 1 - 2**-12, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20,
    65504.0, 65519.0, 65520.0 - 2**-8, 65520.0, 65536.0, -65520.0, 1e6,
    2.0**-14, 2.0**-14 - 2**-25, 2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-25 + 2**-40,
    2.0**-26, f32(0x33800001), f32(0x387FFFFF), -2.0**-24, 2.0**-149, 2.0**-126, 2.0**-133,
    2.0**-134, 3 * 2.0**-134, f32(0x7F7FFFFF), f32(0x7F7F0000), f32(0x7F7F8000),
    f32(0x7F7F7FFF), f32(0x3F808000), f32(0x3F818000), f32(0x00008000), f32(0x00018000),
]  # fmt: skip
#: float64 values that float32 rounds onto a tie of the 2-byte format (double rounding).
DOUBLE_ROUNDS = [
    1 + 2**-11 + 2**-40, 1 + 3 * 2**-11 - 2**-40, 65520.0 - 2**-30, -(65520.0 - 2**-30),
    2.0**-25 + 2**-60, 2.0**-14 - 2**-25 - 2**-50, 1 + 2**-8 + 2**-30, 1 + 3 * 2**-8 - 2**-30,
    f32(0x7F7F8000) - 2**100, 1e300, -1e300, 1e-300, 2.0**-134 + 2**-170,
]  # fmt: skip


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
def test_float32_hard_values_round_once(backend, dtype) -> None:
    src = np.array(HARD_F32, dtype=np.float32)
    assert np.array_equal(src.astype(np.float64), np.array(HARD_F32)), "not float32 values"
    got = convert(backend, src, dtype).astype(np.float64)
    want = np.array([round_exact(v, dtype) for v in HARD_F32])
    for v, g, w in zip(HARD_F32, got, want, strict=True):
        assert g == w and math.copysign(1, g) == math.copysign(1, w), f"{v!r}: {g!r} != {w!r}"


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
def test_float64_rounds_once_not_through_float32_rne(backend, dtype) -> None:
    values = HARD_F32 + DOUBLE_ROUNDS
    got = convert(backend, np.array(values), dtype).astype(np.float64)
    with np.errstate(over="ignore"):
        twice = np.array(values).astype(np.float32).astype(dtype).astype(np.float64)
    moved = 0
    for v, g, t in zip(values, got, twice, strict=True):
        w = round_exact(v, dtype)
        assert g == w and math.copysign(1, g) == math.copysign(1, w), f"{v!r}: {g!r} != {w!r}"
        moved += t != w
    assert moved >= 3, "the list no longer has values that double-round through float32"


def test_nan_stays_nan_with_its_sign_and_top_payload(backend) -> None:
    pats = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 0x7FC12345, 0x7FFFFFFF],
                    dtype=np.uint32)  # fmt: skip
    src = pats.view(np.float32)
    for dtype, keep in ((F16, 13), (BF16, 16)):
        h = u16(convert(backend, src, dtype)).astype(np.uint32)
        exp_mask = 0x7C00 if dtype == F16 else 0x7F80
        quiet = 0x0200 if dtype == F16 else 0x0040
        assert np.all(h & exp_mask == exp_mask) and np.all(h & quiet), [hex(x) for x in h]
        assert np.array_equal(h >> 15, pats >> 31), "NaN sign lost"
        top = (pats & 0x7FFFFF) >> keep  # payload bits the format has room for
        assert np.array_equal(h & (quiet - 1), top & (quiet - 1)), [hex(x) for x in h]
    d = np.array([math.nan, -math.nan])
    for dtype in (F16, BF16):
        h = convert(backend, d, dtype).astype(np.float64)
        assert np.isnan(h).all() and list(np.signbit(h)) == [False, True]


def test_every_float16_and_bfloat16_widens_exactly(backend) -> None:
    pats = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for dtype in (F16, BF16):
        x = pats.view(dtype)
        got32 = convert(backend, x, np.float32)
        if dtype == F16:
            ref = x.astype(np.float32)
        else:  # bfloat16 is the top half of a float32: the independent reference
            ref = (pats.astype(np.uint32) << 16).view(np.float32)
        nan = np.isnan(ref)
        assert np.array_equal(got32.view(np.uint32)[~nan], ref.view(np.uint32)[~nan])
        assert np.isnan(got32[nan]).all()
        assert np.array_equal(np.signbit(got32[nan]), np.signbit(ref[nan]))
        got64 = convert(backend, x, np.float64)
        assert np.array_equal(got64[~nan], ref[~nan].astype(np.float64))
        assert np.isnan(got64[nan]).all()


def test_random_float32_bits_match_numpy_and_ml_dtypes(backend) -> None:
    rng = np.random.default_rng(34)
    pats = rng.integers(0, 1 << 32, 1_000_003, dtype=np.uint64).astype(np.uint32)
    x = pats.view(np.float32)
    nan = np.isnan(x)
    with np.errstate(all="ignore"):
        refs = {F16: x.astype(np.float16), BF16: x.astype(BF16)}
    for dtype, ref in refs.items():
        got = convert(backend, x, dtype)
        bad = np.flatnonzero(u16(got)[~nan] != u16(ref)[~nan])
        assert bad.size == 0, f"{dtype}: {bad.size} differ, e.g. {x[~nan][bad[:3]]}"


def test_random_float64_match_numpy_and_ml_dtypes(backend) -> None:
    rng = np.random.default_rng(35)
    n = 300_001
    d = rng.standard_normal(n) * np.exp2(rng.integers(-150, 130, n))
    # and values right beside the format's ties, where one rounding and two differ
    ties = np.array([v for v in DOUBLE_ROUNDS if abs(v) < 1e300])
    d = np.concatenate([d, ties, np.nextafter(ties, 0), np.nextafter(ties, np.inf)])
    with np.errstate(all="ignore"):
        refs = {F16: d.astype(np.float16), BF16: d.astype(BF16)}
    for dtype, ref in refs.items():
        got = convert(backend, d, dtype)
        bad = np.flatnonzero(u16(got) != u16(ref))
        assert bad.size == 0, f"{dtype}: {bad.size} differ, e.g. {d[bad[:3]]}"


def test_float16_bfloat16_between_each_other_round_once(backend) -> None:
    pats = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for src, dst in ((F16, BF16), (BF16, F16)):
        x = pats.view(src)
        with np.errstate(invalid="ignore"):
            wide = x.astype(np.float64)  # exact
        ok = ~np.isnan(wide)
        got = convert(backend, x, dst).astype(np.float64)
        want = np.array([round_exact(v, dst) for v in wide[ok][::97]])
        assert np.array_equal(got[ok][::97], want)
        assert np.isnan(got[~ok]).all()


def test_odd_lengths_and_chunk_edges_take_the_same_path(backend) -> None:
    """The F16C path converts 8 lanes at a time and tails through a buffer; chunks split
    the work over threads: every length around those edges gives the same bits."""
    rng = np.random.default_rng(1)
    base = (rng.standard_normal(4096 * 3 + 9) * 300).astype(np.float32)
    ref = base.astype(np.float16)
    for n in (0, 1, 7, 8, 9, 15, 17, 4095, 4096, 4097, 4096 * 3 + 9):
        got = convert(backend, base[:n], F16)
        assert np.array_equal(u16(got), u16(ref[:n])), n
        back = convert(backend, got, np.float32)
        assert np.array_equal(back, ref[:n].astype(np.float32)), n
