/* riftco native CPU kernels: fused ops for the "native" backend (see backend.py).
 *
 * Written once, instantiated for float and double: this file includes itself with
 * RIFT_T defined (build.py compiles it through '#include "kernels.c"'). Build flags are
 * -O3 -fno-math-errno -fopenmp only: no -march=native (the binary may run on another CPU
 * of a fleet) and no -ffast-math (it breaks -inf/NaN handling). Instead, hot per-row and
 * per-chunk workers carry RIFT_CLONES: on x86-64 Linux GCC builds an AVX2+FMA copy next to
 * the baseline one and picks at load time (ifunc). Reductions use `omp simd reduction`,
 * the one portable licence to vectorise a float sum without -ffast-math; their order is
 * fixed at compile time, so every run gives the same bits on a given machine.
 *
 * Threads: OpenMP over rows (or chunks, or batch*head); OMP_NUM_THREADS is respected.
 * Every cross-row reduction (LayerNorm dgamma/dbeta, embedding scatter-add) sums in an
 * order that does not depend on the thread count, so results are deterministic.
 */
#ifndef RIFT_T

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define RIFT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RIFT_CLONES
#endif

#ifdef _OPENMP
#include <omp.h>
#define RIFT_PRAGMA(x) _Pragma(#x)
#else
#define RIFT_PRAGMA(x)
#endif
#define RIFT_SIMD_SUM(v) RIFT_PRAGMA(omp simd reduction(+ : v))
#define RIFT_SIMD_MAX(v) RIFT_PRAGMA(omp simd reduction(max : v))
#define RIFT_SIMD RIFT_PRAGMA(omp simd)

/* Below this much work a kernel runs on one thread: waking the sleeping team (futex) costs
 * 30-60 us, more than a memory-bound row kernel on 512 x 128 takes alone. Above it two
 * threads pay: add_layer_norm on the 2-core EPYC, one thread vs two, 1024 x 128 (the small
 * GPT's rows) 0.137 vs 0.103 ms, 2048 x 256 (the large one's) 0.40 vs 0.23 ms.
 * RIFT_PAR_MIN counts elements of compute-heavy kernels (GELU, attention FMAs), RIFT_PAR_ROWS
 * elements of light row kernels (LayerNorm, softmax, cross-entropy, embedding). */
#define RIFT_PAR_MIN 65536
#define RIFT_PAR_ROWS (1 << 16)
#define RIFT_CHUNK 8192
/* Rows per partial sum of LayerNorm dgamma/dbeta: fixed, so the order is thread-free;
 * the partials are then summed pairwise (colsum), so the error grows like log(rows). */
#define RIFT_LN_ROWS 64
/* Keys per block of the flash kernels (the CPU reference uses the same block). */
#define RIFT_FLASH_BLOCK 64

int rift_num_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* exp for float that GCC vectorises (no libm call): Cody-Waite reduction, Cephes
 * polynomial (about 1 ulp), 2^n applied as two exact halves so that overflow gives inf
 * and underflow goes gradually to 0 like libm. NaN in, NaN out; exp(-inf) = 0. */
static inline float rift_expf(float x) {
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 88.8f ? 88.8f : xc;
    float nf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    int32_t n = (int32_t)nf;
    float r = (xc - nf * 0.693359375f) + nf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    int32_t h = n >> 1;
    union { int32_t i; float f; } s1, s2;
    s1.i = (h + 127) << 23;
    s2.i = (n - h + 127) << 23;
    float res = y * s1.f * s2.f;
    return x != x ? x : res;
}

/* Scratch memory per thread for attention (K^T, V^T tiles, score rows). */
static void *rift_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    return p;
}

#include "kernels_tile.c" /* the float register tile of attention's products */

#define RIFT_T float
#define RIFT_SFX(name) name##_f32
#define RIFT_EXP(x) rift_expf(x)
#define RIFT_LOG(x) logf(x)
#define RIFT_SQRT(x) sqrtf(x)
#define RIFT_TANH(x) tanhf(x)
#define RIFT_ERF(x) erff(x)
#include "kernels.c"
#undef RIFT_T
#undef RIFT_SFX
#undef RIFT_EXP
#undef RIFT_LOG
#undef RIFT_SQRT
#undef RIFT_TANH
#undef RIFT_ERF

#define RIFT_T double
#define RIFT_SFX(name) name##_f64
#define RIFT_EXP(x) exp(x)
#define RIFT_LOG(x) log(x)
#define RIFT_SQRT(x) sqrt(x)
#define RIFT_TANH(x) tanh(x)
#define RIFT_ERF(x) erf(x)
#include "kernels.c"

#include "kernels_half.c" /* float16/bfloat16 storage conversion (once, not per dtype) */
#include "kernels_half_ops.c" /* ops on 2-byte storage through float32 rows */
#include "kernels_half_matmul.c" /* matmul, linear (+GELU) and backward, 2-byte */

#else /* ---------------------------------------------------------------- one dtype */

#define T RIFT_T
#define F(name) RIFT_SFX(name)

#include "kernels_blas.c" /* first: LayerNorm's backward sums its partials with colsum */

/* -- GELU --------------------------------------------------------------------------- */
/* tanh form as x * sigmoid(2u): 0.5(1 + tanh u) = sigmoid(2u) exactly, and the sigmoid
 * form neither cancels for negative x nor needs a tanh the compiler cannot vectorise. */
#define RIFT_GELU_C ((T)0.7978845608028654) /* sqrt(2 / pi) */
#define RIFT_GELU_A ((T)0.044715)
/* The tanh form's argument u = sqrt(2/pi) (x + 0.044715 x^3), the forward's and the
 * derivative's alike; a macro, so each loop compiles as it did with it written out. */
#define RIFT_GELU_U(xi) (RIFT_GELU_C * ((xi) + RIFT_GELU_A * ((xi) * (xi) * (xi))))

RIFT_CLONES static void F(gelu_chunk)(const T *x, T *y, int64_t n, int approx) {
    if (approx) {
        RIFT_SIMD
        for (int64_t i = 0; i < n; i++) {
            T xi = x[i];
            T u = RIFT_GELU_U(xi);
            y[i] = xi / ((T)1 + RIFT_EXP((T)-2 * u));
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            y[i] = (T)0.5 * x[i] * ((T)1 + RIFT_ERF(x[i] * (T)0.7071067811865476));
    }
}

RIFT_CLONES static void F(gelu_bwd_chunk)(const T *dy, const T *x, T *dx, int64_t n, int approx) {
    if (approx) {
        RIFT_SIMD
        for (int64_t i = 0; i < n; i++) {
            T xi = x[i];
            T u = RIFT_GELU_U(xi);
            T s = (T)1 / ((T)1 + RIFT_EXP((T)-2 * u)); /* 0.5 (1 + tanh u) */
            T du = RIFT_GELU_C * ((T)1 + (T)3 * RIFT_GELU_A * xi * xi);
            /* 0.5 x (1 - tanh^2 u) du = 2 x s (1 - s) du */
            dx[i] = dy[i] * (s + (T)2 * xi * s * ((T)1 - s) * du);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            T xi = x[i];
            T cdf = (T)0.5 * ((T)1 + RIFT_ERF(xi * (T)0.7071067811865476));
            T pdf = RIFT_EXP((T)-0.5 * xi * xi) * (T)0.3989422804014327;
            dx[i] = dy[i] * (cdf + xi * pdf);
        }
    }
}

void F(gelu)(const T *x, T *y, int64_t n, int approx) {
    int64_t chunks = (n + RIFT_CHUNK - 1) / RIFT_CHUNK;
    RIFT_PRAGMA(omp parallel for schedule(static) if (n > RIFT_PAR_MIN))
    for (int64_t c = 0; c < chunks; c++) {
        int64_t lo = c * RIFT_CHUNK, hi = lo + RIFT_CHUNK < n ? lo + RIFT_CHUNK : n;
        F(gelu_chunk)(x + lo, y + lo, hi - lo, approx);
    }
}

void F(gelu_backward)(const T *dy, const T *x, T *dx, int64_t n, int approx) {
    int64_t chunks = (n + RIFT_CHUNK - 1) / RIFT_CHUNK;
    RIFT_PRAGMA(omp parallel for schedule(static) if (n > RIFT_PAR_MIN))
    for (int64_t c = 0; c < chunks; c++) {
        int64_t lo = c * RIFT_CHUNK, hi = lo + RIFT_CHUNK < n ? lo + RIFT_CHUNK : n;
        F(gelu_bwd_chunk)(dy + lo, x + lo, dx + lo, hi - lo, approx);
    }
}

/* -- softmax ------------------------------------------------------------------------ */
/* y[0..n) = exp(x - m) / sum for a row x whose max is m; y may be x. Softmax and attention's
 * scaled softmax share it. A macro, so that the loops vectorise inside each caller's
 * clone as they did written out there: the sum's order, and with it the bits, stay. */
#define RIFT_EXP_NORMALIZE(x, y, n, m)                           \
    do {                                                         \
        T s_ = 0;                                                \
        RIFT_SIMD_SUM(s_)                                        \
        for (int64_t j_ = 0; j_ < (n); j_++) {                   \
            T e_ = RIFT_EXP((x)[j_] - (m));                      \
            (y)[j_] = e_;                                        \
            s_ += e_;                                            \
        }                                                        \
        T inv_ = (T)1 / s_;                                      \
        RIFT_SIMD                                                \
        for (int64_t j_ = 0; j_ < (n); j_++) (y)[j_] *= inv_;    \
    } while (0)

/* y = exp(x - max) / sum. An all -inf row gives (-inf) - (-inf) = NaN, as the math says. */
RIFT_CLONES static void F(softmax_row)(const T *x, T *y, int64_t n) {
    T m = -INFINITY;
    RIFT_SIMD_MAX(m)
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    RIFT_EXP_NORMALIZE(x, y, n, m);
}

RIFT_CLONES static void F(softmax_bwd_row)(const T *dy, const T *y, T *dx, int64_t n) {
    T s = 0;
    RIFT_SIMD_SUM(s)
    for (int64_t j = 0; j < n; j++) s += dy[j] * y[j];
    RIFT_SIMD
    for (int64_t j = 0; j < n; j++) dx[j] = y[j] * (dy[j] - s);
}

void F(softmax)(const T *x, T *y, int64_t rows, int64_t cols) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_ROWS))
    for (int64_t r = 0; r < rows; r++) F(softmax_row)(x + r * cols, y + r * cols, cols);
}

void F(softmax_backward)(const T *dy, const T *y, T *dx, int64_t rows, int64_t cols) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_ROWS))
    for (int64_t r = 0; r < rows; r++)
        F(softmax_bwd_row)(dy + r * cols, y + r * cols, dx + r * cols, cols);
}

/* -- LayerNorm ---------------------------------------------------------------------- */
RIFT_CLONES static void F(ln_row)(const T *x, const T *g, const T *b, T *y, T *mean, T *rstd,
                                  int64_t n, T eps) {
    T s = 0;
    RIFT_SIMD_SUM(s)
    for (int64_t j = 0; j < n; j++) s += x[j];
    T mu = s / (T)n;
    T v = 0;
    RIFT_SIMD_SUM(v)
    for (int64_t j = 0; j < n; j++) v += (x[j] - mu) * (x[j] - mu);
    T r = (T)1 / RIFT_SQRT(v / (T)n + eps);
    RIFT_SIMD
    for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mu) * r * g[j] + b[j];
    *mean = mu;
    *rstd = r;
}

void F(layer_norm)(const T *x, const T *g, const T *b, T *y, T *mean, T *rstd, int64_t rows,
                   int64_t cols, double eps) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_ROWS))
    for (int64_t r = 0; r < rows; r++)
        F(ln_row)(x + r * cols, g, b, y + r * cols, mean + r, rstd + r, cols, (T)eps);
}

/* dx for rows [lo, hi) and this block's partial dgamma, dbeta (in row order). */
RIFT_CLONES static void F(ln_bwd_rows)(const T *dy, const T *x, const T *g, const T *mean,
                                       const T *rstd, T *dx, T *pg, T *pb, int64_t lo,
                                       int64_t hi, int64_t n) {
    for (int64_t j = 0; j < n; j++) pg[j] = pb[j] = 0;
    for (int64_t r = lo; r < hi; r++) {
        const T *dyr = dy + r * n, *xr = x + r * n;
        T *dxr = dx + r * n;
        T mu = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
        RIFT_SIMD_SUM(s1)
        for (int64_t j = 0; j < n; j++) s1 += dyr[j] * g[j];
        RIFT_PRAGMA(omp simd reduction(+ : s2))
        for (int64_t j = 0; j < n; j++) s2 += dyr[j] * g[j] * ((xr[j] - mu) * rs);
        T m1 = s1 / (T)n, m2 = s2 / (T)n;
        RIFT_SIMD
        for (int64_t j = 0; j < n; j++) {
            T xh = (xr[j] - mu) * rs;
            dxr[j] = rs * (dyr[j] * g[j] - m1 - xh * m2);
            pg[j] += dyr[j] * xh;
            pb[j] += dyr[j];
        }
    }
}

/* The residual add of add_layer_norm, a loop of its own: never contracted into a
 * neighbouring product (an FMA would round differently from the unfused add). */
RIFT_CLONES static void F(add_row)(const T *a, const T *b, T *out, int64_t n) {
    RIFT_SIMD
    for (int64_t j = 0; j < n; j++) out[j] = a[j] + b[j];
}

/* dx (or, with ds, dsum = ds + dx, each block folded before the next: add_layer_norm's
 * backward) and dgamma, dbeta from per-block partials summed pairwise (colsum). Returns 0,
 * or -1 when scratch memory could not be allocated. */
static int F(ln_backward)(const T *dy, const T *x, const T *g, const T *mean, const T *rstd,
                          const T *ds, T *dx, T *dg, T *db, int64_t rows, int64_t cols) {
    int64_t blocks = (rows + RIFT_LN_ROWS - 1) / RIFT_LN_ROWS;
    if (blocks == 0) blocks = 1;
    T *part = (T *)rift_alloc(sizeof(T) * (size_t)(2 * blocks * cols));
    if (!part) return -1;
    if (rows == 0) memset(part, 0, sizeof(T) * (size_t)(2 * cols));
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_ROWS))
    for (int64_t k = 0; k < blocks; k++) {
        int64_t lo = k * RIFT_LN_ROWS, hi = lo + RIFT_LN_ROWS < rows ? lo + RIFT_LN_ROWS : rows;
        F(ln_bwd_rows)(dy, x, g, mean, rstd, dx, part + 2 * k * cols, part + (2 * k + 1) * cols,
                       lo, hi, cols);
        if (ds) F(add_row)(ds + lo * cols, dx + lo * cols, dx + lo * cols, (hi - lo) * cols);
    }
    int status = F(colsum)(part, blocks, cols, 2 * cols, dg);
    status |= F(colsum)(part + cols, blocks, cols, 2 * cols, db);
    free(part);
    return status;
}

int F(layer_norm_backward)(const T *dy, const T *x, const T *g, const T *mean, const T *rstd,
                           T *dx, T *dg, T *db, int64_t rows, int64_t cols) {
    return F(ln_backward)(dy, x, g, mean, rstd, NULL, dx, dg, db, rows, cols);
}

/* -- embedding ---------------------------------------------------------------------- */
void F(embedding)(const T *table, const int64_t *ids, T *out, int64_t n, int64_t cols) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (n * cols > RIFT_PAR_ROWS))
    for (int64_t i = 0; i < n; i++)
        memcpy(out + i * cols, table + ids[i] * cols, sizeof(T) * (size_t)cols);
}

/* Each thread owns a range of columns and walks the ids in order: no races, and every
 * output element sums its rows in index order whatever the thread count. The sums are
 * compensated (Kahan): a frequent id in a long batch gathers 10^5-10^6 rows, where plain
 * float32 addition drifts by ~1e-5 relative. A compensation that is not finite (the sum
 * reached inf or NaN) is dropped, so IEEE results stay IEEE (inf stays inf). */
RIFT_CLONES static void F(emb_bwd_cols)(const T *dy, const int64_t *ids, T *out, T *comp,
                                        int64_t n, int64_t cols, int64_t lo, int64_t hi) {
    const T big = sizeof(T) == 4 ? (T)3.4028234663852886e38 : (T)1.7976931348623157e308;
    for (int64_t i = 0; i < n; i++) {
        const T *d = dy + i * cols;
        T *o = out + ids[i] * cols, *c = comp + ids[i] * cols;
        RIFT_SIMD
        for (int64_t j = lo; j < hi; j++) {
            T y = d[j] - c[j];
            T t = o[j] + y;
            T e = (t - o[j]) - y;
            c[j] = (e >= -big && e <= big) ? e : (T)0;
            o[j] = t;
        }
    }
}

/* Returns 0, or -1 when the compensation buffer could not be allocated. */
int F(embedding_backward)(const T *dy, const int64_t *ids, T *out, int64_t n, int64_t V,
                          int64_t cols) {
    memset(out, 0, sizeof(T) * (size_t)(V * cols));
    T *comp = (T *)calloc((size_t)(V * cols > 0 ? V * cols : 1), sizeof(T));
    if (!comp) return -1;
    int64_t parts = cols >= 64 ? cols / 32 : 1;
    if (parts > 64) parts = 64;
    RIFT_PRAGMA(omp parallel for schedule(static) if (n * cols > RIFT_PAR_ROWS))
    for (int64_t p = 0; p < parts; p++)
        F(emb_bwd_cols)(dy, ids, out, comp, n, cols, p * cols / parts, (p + 1) * cols / parts);
    free(comp);
    return 0;
}

/* -- cross-entropy ------------------------------------------------------------------ */
RIFT_CLONES static T F(lse_row)(const T *x, int64_t n) {
    T m = -INFINITY;
    RIFT_SIMD_MAX(m)
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    T s = 0;
    RIFT_SIMD_SUM(s)
    for (int64_t j = 0; j < n; j++) s += RIFT_EXP(x[j] - m);
    return m + RIFT_LOG(s);
}

void F(cross_entropy)(const T *logits, const int64_t *t, T *loss, T *lse, int64_t n, int64_t V) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (n * V > RIFT_PAR_ROWS))
    for (int64_t i = 0; i < n; i++) {
        T l = F(lse_row)(logits + i * V, V);
        lse[i] = l;
        loss[i] = t[i] < 0 ? (T)0 : l - logits[i * V + t[i]];
    }
}

RIFT_CLONES static void F(ce_bwd_row)(const T *x, T *g, int64_t n, T l, T scale) {
    RIFT_SIMD
    for (int64_t j = 0; j < n; j++) g[j] = RIFT_EXP(x[j] - l) * scale;
}

void F(cross_entropy_backward)(const T *dloss, int64_t dloss_stride, const T *logits,
                               const int64_t *t, const T *lse, T *dl, int64_t n, int64_t V) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (n * V > RIFT_PAR_ROWS))
    for (int64_t i = 0; i < n; i++) {
        T *g = dl + i * V;
        if (t[i] < 0) {
            memset(g, 0, sizeof(T) * (size_t)V);
            continue;
        }
        T s = dloss[i * dloss_stride];
        F(ce_bwd_row)(logits + i * V, g, V, lse[i], s);
        g[t[i]] -= s;
    }
}

#include "kernels_norm.c" /* after LayerNorm: reuses its row workers */
#include "kernels_rms_norm.c"
#include "kernels_optim.c"
#include "kernels_linear_gelu.c"
#include "kernels_layout.c"
#include "kernels_attention.c"

#undef T
#undef F
#undef RIFT_GELU_C
#undef RIFT_GELU_A
#undef RIFT_GELU_U
#undef RIFT_EXP_NORMALIZE
#endif
