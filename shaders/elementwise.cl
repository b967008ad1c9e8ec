/* Elementwise kernels: unary, binary, with a scalar, where, comparisons.
 *
 * One element per thread: the host launches n threads (rounded up, so bounds-checked).
 * (A grid-stride loop here halves PoCL throughput: it defeats work-item vectorisation.)
 * Integer params P: [0] n (element count); scalar_pow adds [1] integral mode, [2] exponent.
 * Float params F (element type): [0] the scalar.
 * Buffers: out, inputs..., P, (F).
 */

#define RIFTCO_UNARY(name, expr)                                                       \
    KERNEL void name(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),                   \
                     GLOBAL const int* P ARG(2) THREAD_ARGS) {                         \
        const int n = P[0];                                                            \
        const int i = GID; if (i < n) {                                   \
            const T v = x[i];                                                          \
            out[i] = (expr);                                                           \
        }                                                                              \
    }

/* tanh(±20) rounds to ±1 in float and double; clamping avoids the NaN some fast-math
 * tanh implementations return for large |x|. */
RIFTCO_UNARY(unary_neg, -v)
RIFTCO_UNARY(unary_exp, exp(v))
RIFTCO_UNARY(unary_log, log(v))
RIFTCO_UNARY(unary_sqrt, sqrt(v))
RIFTCO_UNARY(unary_rsqrt, (T)1 / sqrt(v))
RIFTCO_UNARY(unary_tanh, tanh(clamp(v, (T)-20, (T)20)))
RIFTCO_UNARY(unary_abs, fabs(v))

#define RIFTCO_BINARY(name, expr)                                                      \
    KERNEL void name(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),                   \
                     GLOBAL const T* y ARG(2), GLOBAL const int* P ARG(3) THREAD_ARGS) { \
        const int n = P[0];                                                            \
        const int i = GID; if (i < n) {                                   \
            const T a = x[i];                                                          \
            const T b = y[i];                                                          \
            out[i] = (expr);                                                           \
        }                                                                              \
    }

/* maximum/minimum propagate NaN like numpy (fmax/fmin would drop it). */
RIFTCO_BINARY(binary_add, a + b)
RIFTCO_BINARY(binary_sub, a - b)
RIFTCO_BINARY(binary_mul, a * b)
RIFTCO_BINARY(binary_div, a / b)
RIFTCO_BINARY(binary_maximum, (a > b || a != a) ? a : b)
RIFTCO_BINARY(binary_minimum, (a < b || a != a) ? a : b)
RIFTCO_BINARY(cmp_lt, (a < b) ? (T)1 : (T)0)
RIFTCO_BINARY(cmp_le, (a <= b) ? (T)1 : (T)0)
RIFTCO_BINARY(cmp_gt, (a > b) ? (T)1 : (T)0)
RIFTCO_BINARY(cmp_ge, (a >= b) ? (T)1 : (T)0)
RIFTCO_BINARY(cmp_eq, (a == b) ? (T)1 : (T)0)
RIFTCO_BINARY(cmp_ne, (a != b) ? (T)1 : (T)0)

#define RIFTCO_SCALAR(name, expr)                                                      \
    KERNEL void name(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),                   \
                     GLOBAL const int* P ARG(2), GLOBAL const T* F ARG(3) THREAD_ARGS) { \
        const int n = P[0];                                                            \
        const T s = F[0];                                                              \
        const int i = GID; if (i < n) {                                   \
            const T v = x[i];                                                          \
            out[i] = (expr);                                                           \
        }                                                                              \
    }

RIFTCO_SCALAR(scalar_add, v + s)
RIFTCO_SCALAR(scalar_mul, v * s)

/* Exact power by squaring for integral exponents (sign of negative bases preserved). */
INLINE T riftco_ipow(T v, int e) {
    T r = (T)1;
    T b = v;
    int k = e < 0 ? -e : e;
    while (k > 0) {
        if (k & 1) r *= b;
        b *= b;
        k >>= 1;
    }
    return e < 0 ? (T)1 / r : r;
}

KERNEL void scalar_pow(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),
                       GLOBAL const int* P ARG(2), GLOBAL const T* F ARG(3) THREAD_ARGS) {
    const int n = P[0];
    const int integral = P[1];
    const int e = P[2];
    const T s = F[0];
    const int i = GID; if (i < n) {
        const T v = x[i];
        out[i] = integral ? riftco_ipow(v, e) : pow(v, s);
    }
}

KERNEL void where_select(GLOBAL T* out ARG(0), GLOBAL const T* cond ARG(1),
                         GLOBAL const T* x ARG(2), GLOBAL const T* y ARG(3),
                         GLOBAL const int* P ARG(4) THREAD_ARGS) {
    const int n = P[0];
    const int i = GID; if (i < n) {
        out[i] = cond[i] != (T)0 ? x[i] : y[i];
    }
}
