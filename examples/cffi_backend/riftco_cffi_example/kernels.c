/* Kernels of the riftco cffi example backend: plain C99 over dense buffers.
 *
 * Every buffer is allocated here (rc_alloc) and freed here (rc_free, called by a Python
 * finalizer). Elements are 4 bytes (float32 or int32), so layout kernels move uint32_t.
 * Long sums accumulate in double: cheap here, and it keeps float32 results accurate.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory: a 16-byte header remembers the size for the statistics ---------------- */
static int64_t g_allocated = 0, g_peak = 0;

void *rc_alloc(int64_t nbytes) {
    char *raw = (char *)malloc((size_t)nbytes + 16);
    if (!raw) return NULL;
    *(int64_t *)raw = nbytes;
    g_allocated += nbytes;
    if (g_allocated > g_peak) g_peak = g_allocated;
    return raw + 16;
}

void rc_free(void *p) {
    if (!p) return;
    char *raw = (char *)p - 16;
    g_allocated -= *(int64_t *)raw;
    free(raw);
}

int64_t rc_allocated_bytes(void) { return g_allocated; }
int64_t rc_peak_bytes(void) { return g_peak; }

/* ---- layout -------------------------------------------------------------------------- */
/* Gather a strided view (strides and offset in elements, any sign-free layout) densely. */
void rc_copy_strided(const uint32_t *src, uint32_t *dst, int ndim, const int64_t *shape,
                     const int64_t *strides, int64_t offset) {
    int64_t idx[16] = {0}, n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t at = offset;
        for (int d = 0; d < ndim; d++) at += idx[d] * strides[d];
        dst[i] = src[at];
        for (int d = ndim - 1; d >= 0; d--) { /* odometer over the view's shape */
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* Copy a [rows, width] block between row-major buffers of different widths. */
void rc_copy_block(const uint32_t *src, int64_t src_w, int64_t src_col, uint32_t *dst,
                   int64_t dst_w, int64_t dst_col, int64_t rows, int64_t width) {
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + r * dst_w + dst_col, src + r * src_w + src_col, (size_t)width * 4);
}

void rc_fill_f32(float *x, int64_t n, float v) { for (int64_t i = 0; i < n; i++) x[i] = v; }
void rc_fill_i32(int32_t *x, int64_t n, int32_t v) { for (int64_t i = 0; i < n; i++) x[i] = v; }

/* ---- elementwise --------------------------------------------------------------------- */
enum { U_NEG, U_EXP, U_LOG, U_SQRT, U_RSQRT, U_TANH, U_ABS };
void rc_unary(int op, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        switch (op) {
        case U_NEG: y[i] = -v; break;
        case U_EXP: y[i] = expf(v); break;
        case U_LOG: y[i] = logf(v); break;
        case U_SQRT: y[i] = sqrtf(v); break;
        case U_RSQRT: y[i] = 1.0f / sqrtf(v); break;
        case U_TANH: y[i] = tanhf(v); break;
        default: y[i] = fabsf(v); break;
        }
    }
}

enum { B_ADD, B_SUB, B_MUL, B_DIV, B_MAX, B_MIN };
void rc_binary(int op, const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float u = a[i], v = b[i];
        switch (op) {
        case B_ADD: y[i] = u + v; break;
        case B_SUB: y[i] = u - v; break;
        case B_MUL: y[i] = u * v; break;
        case B_DIV: y[i] = u / v; break;
        case B_MAX: y[i] = (u != u || u > v) ? u : v; break; /* NaN propagates, like numpy */
        default: y[i] = (u != u || u < v) ? u : v; break;
        }
    }
}

enum { S_ADD, S_MUL, S_POW };
void rc_scalar(int op, const float *x, float v, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (op == S_ADD) y[i] = x[i] + v;
        else if (op == S_MUL) y[i] = x[i] * v;
        /* C pow handles negative bases for integral exponents; riftco's pow of -inf to a
         * fractional power is NaN like any negative base (C99 says +inf there) */
        else y[i] = (isinf(x[i]) && x[i] < 0 && v > 0 && v != floorf(v)) ? NAN : powf(x[i], v);
    }
}

void rc_where(const float *c, const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = c[i] != 0.0f ? a[i] : b[i];
}

enum { C_LT, C_LE, C_GT, C_GE, C_EQ, C_NE };
void rc_compare(int op, const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float u = a[i], v = b[i];
        int r = op == C_LT ? u < v : op == C_LE ? u <= v : op == C_GT ? u > v
              : op == C_GE ? u >= v : op == C_EQ ? u == v : u != v;
        y[i] = r ? 1.0f : 0.0f;
    }
}

void rc_cast_f32_i32(const float *x, int32_t *y, int64_t n) {
    /* truncate toward zero, saturate to the int32 range, NaN -> 0 (a bare C cast is
     * undefined out of range) */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = isnan(v) ? 0 : v >= 2147483647.0f ? INT32_MAX : v <= -2147483648.0f ? INT32_MIN
                                                                                    : (int32_t)v;
    }
}
void rc_cast_i32_f32(const int32_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
}

/* ---- reductions ---------------------------------------------------------------------- */
/* out_strides[d] is 0 for a reduced axis, else the output stride of axis d. */
void rc_reduce(int is_max, const float *x, float *y, int ndim, const int64_t *shape,
               const int64_t *out_strides, int64_t out_n) {
    double *acc = (double *)malloc(sizeof(double) * (size_t)(out_n ? out_n : 1));
    for (int64_t o = 0; o < out_n; o++) acc[o] = is_max ? -INFINITY : 0.0;
    int64_t idx[16] = {0}, n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t o = 0;
        for (int d = 0; d < ndim; d++) o += idx[d] * out_strides[d];
        double v = x[i];
        if (!is_max) acc[o] += v;
        else if (v != v || v > acc[o]) acc[o] = v;
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    for (int64_t o = 0; o < out_n; o++) y[o] = (float)acc[o];
    free(acc);
}

void rc_argmax(const float *x, int32_t *y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        int64_t best = 0;
        for (int64_t c = 1; c < cols && !isnan(row[best]); c++)
            if (isnan(row[c]) || row[c] > row[best]) best = c; /* the first NaN, else the first maximum */
        y[r] = (int32_t)best;
    }
}

/* ---- matmul: op(a)[m, k] @ op(b)[k, n] per batch ------------------------------------- */
void rc_matmul(const float *a, const float *b, float *c, int64_t batch, int64_t m, int64_t k,
               int64_t n, int ta, int tb) {
    for (int64_t z = 0; z < batch; z++) {
        const float *A = a + z * m * k, *B = b + z * k * n;
        float *C = c + z * m * n;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0.0;
                for (int64_t p = 0; p < k; p++)
                    s += (double)(ta ? A[p * m + i] : A[i * k + p]) *
                         (double)(tb ? B[j * k + p] : B[p * n + j]);
                C[i * n + j] = (float)s;
            }
    }
}

/* ---- fused ops written natively (the rest use riftco's composites) --------------------- */
void rc_softmax(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *in = x + r * cols;
        float *out = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; c++) m = in[c] > m ? in[c] : m;
        double s = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            out[c] = expf(in[c] - m); /* an all -inf row gives NaN, as the protocol says */
            s += out[c];
        }
        for (int64_t c = 0; c < cols; c++) out[c] = (float)(out[c] / s);
    }
}

void rc_layer_norm(const float *x, const float *g, const float *b, float eps, float *y,
                   float *mean, float *rstd, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *in = x + r * cols;
        double mu = 0.0, var = 0.0;
        for (int64_t c = 0; c < cols; c++) mu += in[c];
        mu /= (double)cols;
        for (int64_t c = 0; c < cols; c++) var += (in[c] - mu) * (in[c] - mu); /* two-pass */
        var /= (double)cols;
        double rs = 1.0 / sqrt(var + (double)eps);
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] = (float)((in[c] - mu) * rs * g[c] + b[c]);
        mean[r] = (float)mu;
        rstd[r] = (float)rs;
    }
}
