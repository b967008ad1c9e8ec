/* Half-precision storage: float16 and bfloat16 held in kernels as their 16 bits (ushort).
 *
 * Programs for a 2-byte float dtype get T = ushort (core/kernel_host/sources.py): moving
 * data (copy.cl) moves bits, and every conversion to or from a wider float goes through
 * the functions below, which compute in float32 (or float64) and round ONCE, to nearest
 * even, keeping subnormals, overflowing to +-inf, and keeping NaN a NaN with its sign
 * (the payload is the device's: a quiet NaN, top payload bits kept by the bit-level code;
 * PoCL's vstore_half gives the all-ones payload).
 *
 *   float  riftco_f16_to_float(ushort)    ushort riftco_f16_from_float(float)
 *   float  riftco_bf16_to_float(ushort)   ushort riftco_bf16_from_float(float)
 *   double riftco_f16_to_double(ushort)   ushort riftco_f16_from_double(double)   (FP64)
 *   double riftco_bf16_to_double(ushort)  ushort riftco_bf16_from_double(double)  (FP64)
 *
 * Which code runs where:
 *   float16, OpenCL: core OpenCL's vload_half / vstore_half_rte (no cl_khr_fp16 needed;
 *     the double overload of vstore_half_rte rounds once from the double).
 *   float16, Metal: MSL's `half` (float -> half conversions round to nearest even).
 *   float16, CUDA, and bfloat16 everywhere: the bit-level code below (integer arithmetic
 *     on the IEEE fields). NVRTC's pip wheel ships no cuda_fp16.h / cuda_bf16.h, and the
 *     Metal runtime asks for MSL 2.3, while `bfloat` needs MSL 3.1.
 *   RIFTCO_HALF_BITS (a host define) forces the bit-level code on every dialect, so the
 *     tests run CUDA's float16 path on OpenCL (tests/kernels/test_half_casts.py).
 * Nothing here compares a float: specials are decided on bits, so fast math (Metal's
 * default, the OpenCL fast-math build) cannot fold them away. Widening is exact and
 * writes bits, so a device that flushes float32 subnormals in arithmetic still gets
 * bfloat16's subnormals through.
 */
#ifndef RIFTCO_HALF_H
#define RIFTCO_HALF_H

/* ---- bit level: every dialect ----------------------------------------------------------- */

/* float32 bits -> a 16-bit float with `mbits` mantissa bits and exponent bias `bias`
 * (float16: 10, 15; bfloat16: 7, 127), rounded once to nearest even. Branch-free (every
 * case computed, one selected), so a CPU compiler vectorises it and a GPU warp does not
 * diverge. */
INLINE ushort riftco_narrow_f32_bits(uint u, int mbits, int bias) {
    const uint sign = (u >> 16) & 0x8000u;
    const uint a = u & 0x7fffffffu;
    const uint inf = (uint)(2 * bias + 1) << mbits;
    const int e = (int)(a >> 23);
    const int te = (e > 0 ? e : 1) - 127 + bias;  /* the target's biased exponent */
    const uint m = (a & 0x7fffffu) | (e > 0 ? 0x800000u : 0u);
    /* right shift onto the target's last place: more for a subnormal result; 25 or more
     * leaves nothing (m < 2^24), not even a rounding bit */
    const int wanted = 23 - mbits + (te >= 1 ? 0 : 1 - te);
    const int shift = wanted < 25 ? wanted : 25;
    uint q = m >> shift;
    const uint round = (m >> (shift - 1)) & 1u;
    const uint sticky = (m & ((1u << (shift - 1)) - 1u)) != 0u ? 1u : 0u;
    q += round & (sticky | (q & 1u));
    /* a normal result is (te - 1) << mbits plus q with its leading bit: a carry out of the
     * mantissa moves into the exponent, as rounding up a power of two should */
    const uint r = te >= 1 ? ((uint)(te - 1) << mbits) + q : q;
    const uint finite = r >= inf ? inf : r;
    const uint nan = inf | (1u << (mbits - 1)) | ((a >> (23 - mbits)) & ((1u << mbits) - 1u));
    return (ushort)(sign | (a > 0x7f800000u ? nan : (a == 0x7f800000u ? inf : finite)));
}

/* A 16-bit float (`mbits`, `bias`) -> float32 bits, exactly (NaN quieted, payload kept). */
INLINE uint riftco_widen_f32_bits(ushort h, int mbits, int bias) {
    const uint sign = ((uint)h & 0x8000u) << 16;
    const int emax = (1 << (15 - mbits)) - 1;
    int e = ((int)h >> mbits) & emax;
    uint m = (uint)h & ((1u << mbits) - 1u);
    if (e == emax) return sign | 0x7f800000u | (m << (23 - mbits)) | (m ? 0x400000u : 0u);
    if (e == 0) {
        if (m == 0u) return sign;
        e = 1;  /* a subnormal: normalise (at most mbits steps) */
        while ((m & (1u << mbits)) == 0u) { m <<= 1; --e; }
        m &= (1u << mbits) - 1u;
    }
    return sign | ((uint)(e - bias + 127) << 23) | (m << (23 - mbits));
}

INLINE ushort riftco_bf16_from_f32_bits(uint u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);  /* quiet NaN */
    /* round to nearest even on the low 16 bits; a carry runs into the exponent (and the
     * largest finite values round up to infinity's pattern, as they should) */
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

INLINE float riftco_bf16_to_float(ushort h) { return RIFTCO_F32_FROM_BITS((uint)h << 16); }
INLINE ushort riftco_bf16_from_float(float v) { return riftco_bf16_from_f32_bits(RIFTCO_F32_BITS(v)); }

#if defined(RIFTCO_FP64)
/* float64 bits -> a 16-bit float, rounded once from the double (no float32 in between). */
INLINE ushort riftco_narrow_f64_bits(ulong u, int mbits, int bias) {
    const uint sign = (uint)(u >> 48) & 0x8000u;
    const ulong a = u & 0x7fffffffffffffffUL;
    const uint inf = (uint)(2 * bias + 1) << mbits;
    if (a > 0x7ff0000000000000UL) {
        const uint top = (uint)(a >> (52 - mbits)) & ((1u << mbits) - 1u);
        return (ushort)(sign | inf | (1u << (mbits - 1)) | top);
    }
    if (a == 0x7ff0000000000000UL) return (ushort)(sign | inf);
    const int e = (int)(a >> 52);
    const int e_eff = e > 0 ? e : 1;
    const int te = e_eff - 1023 + bias;
    const ulong m = (a & 0x000fffffffffffffUL) | (e > 0 ? 0x0010000000000000UL : 0UL);
    const int shift = 52 - mbits + (te >= 1 ? 0 : 1 - te);
    if (shift > 53) return (ushort)sign;
    const ulong q0 = m >> shift;
    const ulong rem = m & ((1UL << shift) - 1UL);
    const ulong halfway = 1UL << (shift - 1);
    const uint q = (uint)q0 + ((rem > halfway || (rem == halfway && (q0 & 1UL))) ? 1u : 0u);
    uint r = te >= 1 ? ((uint)(te - 1) << mbits) + q : q;
    return (ushort)(sign | (r >= inf ? inf : r));
}

/* A 16-bit float -> float64 bits, exactly. */
INLINE ulong riftco_widen_f64_bits(ushort h, int mbits, int bias) {
    const ulong sign = (ulong)((uint)h & 0x8000u) << 48;
    const int emax = (1 << (15 - mbits)) - 1;
    int e = ((int)h >> mbits) & emax;
    uint m = (uint)h & ((1u << mbits) - 1u);
    if (e == emax) {
        return sign | 0x7ff0000000000000UL | ((ulong)m << (52 - mbits)) |
               (m ? 0x0008000000000000UL : 0UL);
    }
    if (e == 0) {
        if (m == 0u) return sign;
        e = 1;
        while ((m & (1u << mbits)) == 0u) { m <<= 1; --e; }
        m &= (1u << mbits) - 1u;
    }
    return sign | ((ulong)(e - bias + 1023) << 52) | ((ulong)m << (52 - mbits));
}

INLINE double riftco_bf16_to_double(ushort h) { return RIFTCO_F64_FROM_BITS(riftco_widen_f64_bits(h, 7, 127)); }
INLINE ushort riftco_bf16_from_double(double v) { return riftco_narrow_f64_bits(RIFTCO_F64_BITS(v), 7, 127); }
#endif

/* ---- float16: the dialect's own conversions where it has them ---------------------------- */
#if defined(__OPENCL_VERSION__) && !defined(RIFTCO_HALF_BITS)
INLINE float riftco_f16_to_float(ushort h) { return vload_half(0, (const __private half*)&h); }
INLINE ushort riftco_f16_from_float(float v) {
    ushort h;
    vstore_half_rte(v, 0, (__private half*)&h);
    return h;
}
#if defined(RIFTCO_FP64)
INLINE double riftco_f16_to_double(ushort h) { return (double)vload_half(0, (const __private half*)&h); }
INLINE ushort riftco_f16_from_double(double v) {
    ushort h;
    vstore_half_rte(v, 0, (__private half*)&h);
    return h;
}
#endif
#elif defined(__METAL_VERSION__) && !defined(RIFTCO_HALF_BITS)
INLINE float riftco_f16_to_float(ushort h) { return float(as_type<half>(h)); }
INLINE ushort riftco_f16_from_float(float v) { return as_type<ushort>(half(v)); }
#else
INLINE float riftco_f16_to_float(ushort h) { return RIFTCO_F32_FROM_BITS(riftco_widen_f32_bits(h, 10, 15)); }
INLINE ushort riftco_f16_from_float(float v) { return riftco_narrow_f32_bits(RIFTCO_F32_BITS(v), 10, 15); }
#if defined(RIFTCO_FP64)
INLINE double riftco_f16_to_double(ushort h) { return RIFTCO_F64_FROM_BITS(riftco_widen_f64_bits(h, 10, 15)); }
INLINE ushort riftco_f16_from_double(double v) { return riftco_narrow_f64_bits(RIFTCO_F64_BITS(v), 10, 15); }
#endif
#endif

/* ---- a program's storage type TS and its loads and stores ------------------------------
 * A family written for it (elementwise.cl) declares tensors TS and computes in T. The
 * host defines RIFTCO_STORAGE_F16 / RIFTCO_STORAGE_BF16 (with T = float) for such a
 * family's half programs: LOAD widens exactly, STORE rounds once (on OpenCL, float16
 * through vload_half / vstore_half_rte on the tensor itself). Otherwise TS is T and both
 * are a plain access. On PoCL, vstore_half is the cost of a float16 store (about 7x a
 * float32 store; bench/half_elementwise.py): no bit-level form measured faster there. */
#if defined(RIFTCO_STORAGE_F16) && defined(__OPENCL_VERSION__) && !defined(RIFTCO_HALF_BITS)
#define TS ushort
#define LOAD(p, i) vload_half((i), (GLOBAL const half*)(p))
#define STORE(p, i, v) vstore_half_rte((v), (i), (GLOBAL half*)(p))
#elif defined(RIFTCO_STORAGE_F16)
#define TS ushort
#define LOAD(p, i) riftco_f16_to_float((p)[i])
#define STORE(p, i, v) ((p)[i] = riftco_f16_from_float(v))
#elif defined(RIFTCO_STORAGE_BF16)
#define TS ushort
#define LOAD(p, i) riftco_bf16_to_float((p)[i])
#define STORE(p, i, v) ((p)[i] = riftco_bf16_from_float(v))
#else
#define TS T
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#endif

#endif /* RIFTCO_HALF_H */
