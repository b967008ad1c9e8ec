/* The float register tile of attention's small products, written with AVX2/FMA intrinsics;
 * included once by kernels.c, ahead of the per-dtype code.
 *
 * Why intrinsics: the portable tile in kernels_attention.c (4 rows x 16 floats held in
 * local arrays across the K loop) is what GCC vectorises well in isolation, but inside the
 * real kernel it keeps part of the accumulators in memory: measured on a Zen 3 core, 37
 * GFLOP/s for the 4 x 16 x 64 products of T = 128 attention, against 82 GFLOP/s for this
 * tile (twelve named registers, no spill). The arithmetic is the same: each output is
 * fma(a[i][k], b[k][j], c) for k = 0, 1, ... from c = 0, then stored or added to C once,
 * exactly as the portable tile's x86-64-v3/v4 clones compute it, so results keep their bits
 * on every machine whose clone has FMA. Elsewhere (no AVX2/FMA, other architectures,
 * double) the portable tile runs.
 */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define RIFT_TILE_F32 1

/* Whether this CPU runs the tile (looked up once; a race only repeats the lookup). */
static int rift_tile_ok(void) {
    static int known = 0, ok = 0;
    if (!known) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        known = 1;
    }
    return ok;
}

#define RIFT_TILE_ROW(r, c0, c1)                             \
    x = _mm256_broadcast_ss(a + (r) * ai + k * ak);          \
    c0 = _mm256_fmadd_ps(x, b0, c0);                         \
    c1 = _mm256_fmadd_ps(x, b1, c1)

#define RIFT_TILE_OUT(r, c0, c1)                                                         \
    if (accumulate) {                                                                    \
        _mm256_storeu_ps(C + (r) * ldc, _mm256_add_ps(_mm256_loadu_ps(C + (r) * ldc), c0)); \
        _mm256_storeu_ps(C + (r) * ldc + 8,                                              \
                         _mm256_add_ps(_mm256_loadu_ps(C + (r) * ldc + 8), c1));         \
    } else {                                                                             \
        _mm256_storeu_ps(C + (r) * ldc, c0);                                             \
        _mm256_storeu_ps(C + (r) * ldc + 8, c1);                                         \
    }

/* C[4 x 16] (=, or += when accumulate) A[4 x K] B[K x 16]; A(i, k) = a[i*ai + k*ak],
 * B(k, j) = b[k*ldb + j], C(i, j) = C[i*ldc + j]. */
__attribute__((target("avx2,fma"))) static void rift_tile4x16_f32(
    int64_t K, const float *a, int64_t ai, int64_t ak, const float *b, int64_t ldb, float *C,
    int64_t ldc, int accumulate) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00;
    __m256 c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    for (int64_t k = 0; k < K; k++) {
        __m256 b0 = _mm256_loadu_ps(b + k * ldb), b1 = _mm256_loadu_ps(b + k * ldb + 8), x;
        RIFT_TILE_ROW(0, c00, c01);
        RIFT_TILE_ROW(1, c10, c11);
        RIFT_TILE_ROW(2, c20, c21);
        RIFT_TILE_ROW(3, c30, c31);
    }
    RIFT_TILE_OUT(0, c00, c01)
    RIFT_TILE_OUT(1, c10, c11)
    RIFT_TILE_OUT(2, c20, c21)
    RIFT_TILE_OUT(3, c30, c31)
}

/* out[c * ld + a] = x[a * xt + c] for a, c < 8: one 8 x 8 block of a transpose in
 * registers (unpack, shuffle, lane permute), instead of 64 scalar moves. Data movement
 * only: the bits are those of any other copy. */
__attribute__((target("avx2"))) static void rift_transpose8_f32(const float *x, int64_t xt,
                                                                 float *out, int64_t ld) {
    __m256 r0 = _mm256_loadu_ps(x), r1 = _mm256_loadu_ps(x + xt);
    __m256 r2 = _mm256_loadu_ps(x + 2 * xt), r3 = _mm256_loadu_ps(x + 3 * xt);
    __m256 r4 = _mm256_loadu_ps(x + 4 * xt), r5 = _mm256_loadu_ps(x + 5 * xt);
    __m256 r6 = _mm256_loadu_ps(x + 6 * xt), r7 = _mm256_loadu_ps(x + 7 * xt);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(out, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(out + ld, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(out + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(out + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(out + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(out + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(out + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(out + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

#undef RIFT_TILE_ROW
#undef RIFT_TILE_OUT
#endif
