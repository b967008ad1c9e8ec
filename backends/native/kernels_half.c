/* Storage conversion between float32/float64 and the 2-byte dtypes float16 and bfloat16
 * (included once by kernels.c, after both dtype instantiations).
 *
 * Every conversion to 2 bytes rounds ONCE to nearest even: subnormals are kept, values at
 * or past the overflow boundary become +-inf, NaN stays NaN (quieted, sign kept). Widening
 * is exact. `kind` says which 2-byte format: RIFT_F16 (IEEE binary16) or RIFT_BF16 (the top
 * half of a binary32).
 *
 * F16C: the CPU's vcvtps2ph/vcvtph2ps convert 8 float16 at a time. Whether to use them is
 * decided at run time, per call (`f16c` argument): the caller asks rift_half_f16c() once
 * (cpuid: F16C and AVX, and the OS saving YMM state) and may force the portable path
 * (RIFTCO_NATIVE_HALF=portable), which is also the one tests check the F16C path against.
 * The portable path is bit arithmetic on uint32 lanes that GCC vectorises (RIFT_CLONES);
 * bfloat16 always takes it (it is a shift and an add; no F16C instruction exists for it).
 *
 * float64 -> 2 bytes: rounding the double to float32 (RNE) and that to 2 bytes (RNE) would
 * round twice (65519.99 -> 65520.0f -> inf instead of 65504). Instead the double is first
 * rounded to float32 *to odd* (truncate, then set the last bit when anything was cut off),
 * which keeps the information a second rounding needs: with 24 bits against at most 11
 * kept, round-to-odd then round-to-nearest-even equals one rounding to nearest even.
 */

enum { RIFT_F16 = 0, RIFT_BF16 = 1 };
/* Elements per task of the team, and per stack buffer of the float64 paths. */
#define RIFT_HALF_CHUNK 4096
#define RIFT_HALF_PAR (1 << 17)

typedef union {
    float f;
    uint32_t u;
} rift_fu32;

/* -- portable bit arithmetic --------------------------------------------------------- */
static inline uint16_t rift_f32_to_f16_bits(float f) {
    rift_fu32 v = {f};
    uint32_t x = v.u & 0x7fffffffu, sign = (v.u >> 16) & 0x8000u;
    /* normal float16 range: rebias the exponent (127 -> 15), round the 13 cut bits RNE */
    uint32_t normal = (x - 0x38000000u + 0xfffu + ((x >> 13) & 1u)) >> 13;
    /* subnormal float16 (|f| < 2^-14): the 24-bit significand shifted right by 126 - e */
    uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* >= 14 here; past 24 everything rounds to 0 */
    uint32_t s = shift > 24u ? 24u : (shift < 1u ? 1u : shift); /* clamped: defined shifts */
    uint32_t q = m >> s, rem = m & ((1u << s) - 1u), halfway = 1u << (s - 1u);
    uint32_t sub = q + (uint32_t)(rem > halfway || (rem == halfway && (q & 1u)));
    sub = shift > 24u ? 0u : sub;
    uint32_t nan = 0x7e00u | ((x >> 13) & 0x3ffu); /* quiet, top payload bits kept */
    uint32_t h = x >= 0x38800000u ? normal : sub;
    h = x >= 0x477ff000u ? 0x7c00u : h; /* >= 65520: rounds past 65504 */
    h = x > 0x7f800000u ? nan : h;
    return (uint16_t)(sign | h);
}

static inline float rift_f16_bits_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    rift_fu32 normal = {.u = sign | ((e + 112u) << 23) | (m << 13)};
    rift_fu32 special = {.u = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u)};
    float sub = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    float r = e == 0x1fu ? special.f : normal.f;
    return e == 0u ? (sign ? -sub : sub) : r;
}

static inline uint16_t rift_f32_to_bf16_bits(float f) {
    rift_fu32 v = {f};
    uint32_t rounded = (v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16; /* carries into inf */
    uint32_t nan = (v.u >> 16) | 0x0040u;
    return (uint16_t)((v.u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

static inline float rift_bf16_bits_to_f32(uint16_t h) {
    rift_fu32 v = {.u = (uint32_t)h << 16};
    return v.f;
}

/* The double rounded to float32 toward zero, with its last bit set when that was inexact
 * (round to odd). NaN stays NaN, +-inf stays +-inf, finite values past FLT_MAX give
 * +-FLT_MAX (odd), which any 2-byte format then rounds to +-inf. */
static inline float rift_f64_to_f32_odd(double d) {
    float f = (float)d;
    double back = (double)f;
    rift_fu32 v = {f};
    v.u -= (uint32_t)(fabs(back) > fabs(d)); /* rounded away from zero: step back */
    v.u |= (uint32_t)(back != d && d == d);
    return v.f;
}

RIFT_CLONES static void rift_from_f32_portable(const float *x, uint16_t *y, int64_t n, int kind) {
    if (kind == RIFT_BF16) {
        RIFT_SIMD
        for (int64_t i = 0; i < n; i++) y[i] = rift_f32_to_bf16_bits(x[i]);
    } else {
        RIFT_SIMD
        for (int64_t i = 0; i < n; i++) y[i] = rift_f32_to_f16_bits(x[i]);
    }
}

RIFT_CLONES static void rift_to_f32_portable(const uint16_t *x, float *y, int64_t n, int kind) {
    if (kind == RIFT_BF16) {
        RIFT_SIMD
        for (int64_t i = 0; i < n; i++) y[i] = rift_bf16_bits_to_f32(x[i]);
    } else {
        RIFT_SIMD
        for (int64_t i = 0; i < n; i++) y[i] = rift_f16_bits_to_f32(x[i]);
    }
}

/* -- F16C ------------------------------------------------------------------------------ */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define RIFT_HAVE_F16C_CODE 1

int rift_half_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int f16c = (c >> 29) & 1, avx = (c >> 28) & 1, osxsave = (c >> 27) & 1;
    if (!(f16c && avx && osxsave)) return 0;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u; /* the OS saves XMM and YMM registers */
}

/* 8 lanes per instruction; the tail goes through an 8-lane buffer, so every element takes
 * the same instruction (no portable fallback inside the F16C path). */
__attribute__((target("avx,f16c"))) static void rift_from_f32_f16c(const float *x, uint16_t *y,
                                                                    int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(y + i), h);
    }
    if (i < n) {
        float in[8] = {0};
        uint16_t out[8];
        memcpy(in, x + i, sizeof(float) * (size_t)(n - i));
        _mm_storeu_si128((__m128i *)out,
                         _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
        memcpy(y + i, out, sizeof(uint16_t) * (size_t)(n - i));
    }
}

__attribute__((target("avx,f16c"))) static void rift_to_f32_f16c(const uint16_t *x, float *y,
                                                                  int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    if (i < n) {
        uint16_t in[8] = {0};
        float out[8];
        memcpy(in, x + i, sizeof(uint16_t) * (size_t)(n - i));
        _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)in)));
        memcpy(y + i, out, sizeof(float) * (size_t)(n - i));
    }
}
#else
int rift_half_f16c(void) { return 0; }
#endif

/* -- one chunk, either path ------------------------------------------------------------ */
static void rift_from_f32_chunk(const float *x, uint16_t *y, int64_t n, int kind, int f16c) {
#ifdef RIFT_HAVE_F16C_CODE
    if (f16c && kind == RIFT_F16) {
        rift_from_f32_f16c(x, y, n);
        return;
    }
#endif
    (void)f16c;
    rift_from_f32_portable(x, y, n, kind);
}

static void rift_to_f32_chunk(const uint16_t *x, float *y, int64_t n, int kind, int f16c) {
#ifdef RIFT_HAVE_F16C_CODE
    if (f16c && kind == RIFT_F16) {
        rift_to_f32_f16c(x, y, n);
        return;
    }
#endif
    (void)f16c;
    rift_to_f32_portable(x, y, n, kind);
}

RIFT_CLONES static void rift_f64_to_odd_chunk(const double *x, float *y, int64_t n) {
    RIFT_SIMD
    for (int64_t i = 0; i < n; i++) y[i] = rift_f64_to_f32_odd(x[i]);
}

RIFT_CLONES static void rift_f32_to_f64_chunk(const float *x, double *y, int64_t n) {
    RIFT_SIMD
    for (int64_t i = 0; i < n; i++) y[i] = (double)x[i];
}

/* -- entry points: chunks over the team ------------------------------------------------- */
enum { RIFT_FROM_F32, RIFT_TO_F32, RIFT_FROM_F64, RIFT_TO_F64, RIFT_HALF_SWAP };

/* One chunk of `len` elements of conversion `op`; the float64 ones and float16 <->
 * bfloat16 go through a float32 stack buffer (exact, or rounded to odd). */
static void rift_half_chunk(int op, const void *x, void *y, int64_t len, int kind, int f16c) {
    float wide[RIFT_HALF_CHUNK];
    switch (op) {
    case RIFT_FROM_F32: rift_from_f32_chunk(x, y, len, kind, f16c); break;
    case RIFT_TO_F32: rift_to_f32_chunk(x, y, len, kind, f16c); break;
    case RIFT_FROM_F64:
        rift_f64_to_odd_chunk(x, wide, len);
        rift_from_f32_chunk(wide, y, len, kind, f16c);
        break;
    case RIFT_TO_F64:
        rift_to_f32_chunk(x, wide, len, kind, f16c);
        rift_f32_to_f64_chunk(wide, y, len);
        break;
    default: /* RIFT_HALF_SWAP: kind is the source's */
        rift_to_f32_chunk(x, wide, len, kind, f16c);
        rift_from_f32_chunk(wide, y, len, 1 - kind, f16c);
    }
}

/* The body once per chunk of RIFT_HALF_CHUNK of n elements (it sees `lo` and `len`), the
 * chunks split over the team above `par` elements. */
#define RIFT_HALF_EACH_CHUNK(n, par, ...)                                                   \
    do {                                                                                    \
        int64_t chunks_ = ((n) + RIFT_HALF_CHUNK - 1) / RIFT_HALF_CHUNK;                    \
        RIFT_PRAGMA(omp parallel for schedule(static) if ((n) > (par)))                     \
        for (int64_t c_ = 0; c_ < chunks_; c_++) {                                          \
            int64_t lo = c_ * RIFT_HALF_CHUNK;                                              \
            int64_t len = lo + RIFT_HALF_CHUNK < (n) ? RIFT_HALF_CHUNK : (n) - lo;          \
            __VA_ARGS__                                                                     \
        }                                                                                   \
    } while (0)

static void rift_half_run(int op, const void *x, size_t xs, void *y, size_t ys, int64_t n,
                          int kind, int f16c) {
    RIFT_HALF_EACH_CHUNK(n, RIFT_HALF_PAR, {
        rift_half_chunk(op, (const char *)x + (size_t)lo * xs, (char *)y + (size_t)lo * ys, len,
                        kind, f16c);
    });
}

void half_from_f32(const float *x, uint16_t *y, int64_t n, int kind, int f16c) {
    rift_half_run(RIFT_FROM_F32, x, 4, y, 2, n, kind, f16c);
}

void half_to_f32(const uint16_t *x, float *y, int64_t n, int kind, int f16c) {
    rift_half_run(RIFT_TO_F32, x, 2, y, 4, n, kind, f16c);
}

void half_from_f64(const double *x, uint16_t *y, int64_t n, int kind, int f16c) {
    rift_half_run(RIFT_FROM_F64, x, 8, y, 2, n, kind, f16c);
}

void half_to_f64(const uint16_t *x, double *y, int64_t n, int kind, int f16c) {
    rift_half_run(RIFT_TO_F64, x, 2, y, 8, n, kind, f16c);
}

/* float16 <-> bfloat16 (`kind` is the source's): widened exactly, rounded once. */
void half_to_half(const uint16_t *x, uint16_t *y, int64_t n, int kind, int f16c) {
    rift_half_run(RIFT_HALF_SWAP, x, 2, y, 2, n, kind, f16c);
}
