/* Elementwise kernels: unary, binary, with a scalar, where, comparisons.
 *
 * One element per thread: the host launches n threads (rounded up, so bounds-checked).
 * (A grid-stride loop here halves PoCL throughput: it defeats work-item vectorisation.)
 * Integer params P: [0] n (element count); scalar_pow adds [1] exponent kind, [2] exponent.
 * Float params F (element type): [0] the scalar.
 * Buffers: out, inputs..., P, (F).
 *
 * Tensors are TS, computed in T (half.h): the same type for float and double; for float16
 * and bfloat16 the 16-bit storage, loaded to float (LOAD) and rounded once when stored
 * (STORE), with F in float.
 *
 * NaN in gives NaN out, and special inputs get IEEE's (numpy's) special results, decided
 * on the loaded inputs' bit patterns before a builtin sees them (specials.h): under fast
 * math a builtin may assume finite arguments, and `a != a` may fold to false.
 */

#include "specials.h"
#include "half.h"

/* exp, log, sqrt, 1/sqrt and tanh of a loaded value: the builtin only ever gets a finite
 * argument inside its domain. */
INLINE T ew_exp(T v) {
    if (RIFTCO_ISFINITE(v)) return PRECISE_EXP(v);
    if (RIFTCO_ISNAN(v)) return v;
    return RIFTCO_ISPOSINF(v) ? RIFTCO_INF : (T)0.0;
}

INLINE T ew_log(T v) {
    if (RIFTCO_ISNAN(v)) return v;
    if (RIFTCO_ISZERO(v)) return RIFTCO_NEGINF;
    if (RIFTCO_SIGNBIT(v)) return RIFTCO_NAN;
    return RIFTCO_ISPOSINF(v) ? RIFTCO_INF : PRECISE_LOG(v);
}

INLINE T ew_sqrt(T v) {
    if (RIFTCO_ISNAN(v) || RIFTCO_ISZERO(v)) return v; /* sqrt(-0) = -0 */
    if (RIFTCO_SIGNBIT(v)) return RIFTCO_NAN;
    return RIFTCO_ISPOSINF(v) ? RIFTCO_INF : PRECISE_SQRT(v);
}

INLINE T ew_rsqrt(T v) {
    if (RIFTCO_ISNAN(v)) return v;
    if (RIFTCO_ISZERO(v)) return RIFTCO_SIGNBIT(v) ? RIFTCO_NEGINF : RIFTCO_INF; /* 1 / +-0 */
    if (RIFTCO_SIGNBIT(v)) return RIFTCO_NAN;
    return RIFTCO_ISPOSINF(v) ? (T)0.0 : (T)1.0 / PRECISE_SQRT(v);
}

/* a / b with IEEE's answers for NaN, infinite and zero operands, huge divisors and
 * overflowing quotients. Fast-math division multiplies by a refined approximate
 * reciprocal, which gives NaN for 0 / inf and for an overflowing quotient, and 0 when
 * 1 / b is subnormal (|b| >= 2^126 in float). So the exponent fields decide: a gap over
 * bias + 1 always overflows; at bias or bias + 1, a / 4 is divided and the quotient's
 * exponent tells whether times 4 is finite; a huge b is divided as b / 16. The scalings
 * work on the exponent bits (RS_SCALE2): exact, and opaque to fast math's reassociation,
 * which would fold a float scaling straight back into a / b. Subnormal divisors are left
 * to the hardware (Metal flushes them to zero). */
INLINE T ew_div_rare(T a, T b) {
    if (RIFTCO_ISNAN(a) || RIFTCO_ISNAN(b)) return RIFTCO_NAN;
    int neg = RIFTCO_SIGNBIT(a) != RIFTCO_SIGNBIT(b);
    T sinf = neg ? RIFTCO_NEGINF : RIFTCO_INF;
    if (RIFTCO_ISINF(b)) return RIFTCO_ISINF(a) ? RIFTCO_NAN : (neg ? RIFTCO_NEGZERO : (T)0.0);
    if (RIFTCO_ISINF(a) || RIFTCO_ISZERO(b)) return RIFTCO_ISZERO(a) ? RIFTCO_NAN : sinf;
    int top = 2 * RIFTCO_EXP_BIAS; /* the largest finite exponent field */
    int eb = RIFTCO_EXPONENT(b);
    int gap = RIFTCO_EXPONENT(a) - eb;
    if (gap > RIFTCO_EXP_BIAS + 1) return sinf;
    if (eb >= top - 1) { /* |b| >= 2^(bias - 1): 1 / b would be subnormal */
        T q = a / RS_SCALE2(b, -4);
        return RIFTCO_EXPONENT(q) > 4 ? RS_SCALE2(q, -4) : q * (T)0.0625;
    }
    if (gap >= RIFTCO_EXP_BIAS) { /* the quotient may overflow: divide a / 4 */
        T q = RS_SCALE2(a, -2) / b;
        return RIFTCO_EXPONENT(q) + 2 > top ? sinf : RS_SCALE2(q, 2);
    }
    return a / b; /* a subnormal divisor: the hardware's answer */
}

INLINE T ew_div(T a, T b) {
    /* the common case first, decided on exponent fields alone: both operands normal,
     * 1 / b normal, no overflow possible */
    int ea = RIFTCO_EXPONENT(a);
    int eb = RIFTCO_EXPONENT(b);
    int top = 2 * RIFTCO_EXP_BIAS;
    if (ea > 0 && ea <= top && eb > 0 && eb < top - 1 && ea - eb < RIFTCO_EXP_BIAS) {
        return a / b;
    }
    return ew_div_rare(a, b);
}

/* tanh(+-20) rounds to +-1 in float and double; the clamp keeps large |x| away from the
 * fast-math tanh of some GPUs, which returns NaN there. */
INLINE T ew_tanh(T v) {
    if (RIFTCO_ISNAN(v)) return v;
    if (RIFTCO_ISINF(v)) return RIFTCO_SIGNBIT(v) ? (T)-1.0 : (T)1.0;
    return PRECISE_TANH(clamp(v, (T)-20, (T)20));
}

#define RIFTCO_UNARY(name, expr)                                                       \
    KERNEL void name(GLOBAL TS* out ARG(0), GLOBAL const TS* x ARG(1),                   \
                     GLOBAL const int* P ARG(2) THREAD_ARGS) {                         \
        const int n = P[0];                                                            \
        const int i = GID;                                                             \
        if (i < n) {                                                                   \
            const T v = LOAD(x, i);                                                    \
            STORE(out, i, (expr));                                                     \
        }                                                                              \
    }

RIFTCO_UNARY(unary_neg, -v)
RIFTCO_UNARY(unary_exp, ew_exp(v))
RIFTCO_UNARY(unary_log, ew_log(v))
RIFTCO_UNARY(unary_sqrt, ew_sqrt(v))
RIFTCO_UNARY(unary_rsqrt, ew_rsqrt(v))
RIFTCO_UNARY(unary_tanh, ew_tanh(v))
RIFTCO_UNARY(unary_abs, fabs(v))

#define RIFTCO_BINARY(name, expr)                                                      \
    KERNEL void name(GLOBAL TS* out ARG(0), GLOBAL const TS* x ARG(1),                   \
                     GLOBAL const TS* y ARG(2), GLOBAL const int* P ARG(3) THREAD_ARGS) { \
        const int n = P[0];                                                            \
        const int i = GID;                                                             \
        if (i < n) {                                                                   \
            const T a = LOAD(x, i);                                                    \
            const T b = LOAD(y, i);                                                    \
            STORE(out, i, (expr));                                                     \
        }                                                                              \
    }

/* maximum/minimum propagate NaN like numpy (fmax/fmin would drop it); comparisons are
 * IEEE: false when either side is NaN, except ne. NaN is found by bits, never by a != a. */
#define EW_NAN2(a, b) (RIFTCO_ISNAN(a) || RIFTCO_ISNAN(b))
RIFTCO_BINARY(binary_add, a + b)
RIFTCO_BINARY(binary_sub, a - b)
RIFTCO_BINARY(binary_mul, a * b)
RIFTCO_BINARY(binary_div, ew_div(a, b))
RIFTCO_BINARY(binary_maximum, RIFTCO_ISNAN(a) || (!RIFTCO_ISNAN(b) && a > b) ? a : b)
RIFTCO_BINARY(binary_minimum, RIFTCO_ISNAN(a) || (!RIFTCO_ISNAN(b) && a < b) ? a : b)
RIFTCO_BINARY(cmp_lt, !EW_NAN2(a, b) && a < b ? (T)1 : (T)0)
RIFTCO_BINARY(cmp_le, !EW_NAN2(a, b) && a <= b ? (T)1 : (T)0)
RIFTCO_BINARY(cmp_gt, !EW_NAN2(a, b) && a > b ? (T)1 : (T)0)
RIFTCO_BINARY(cmp_ge, !EW_NAN2(a, b) && a >= b ? (T)1 : (T)0)
RIFTCO_BINARY(cmp_eq, !EW_NAN2(a, b) && a == b ? (T)1 : (T)0)
RIFTCO_BINARY(cmp_ne, EW_NAN2(a, b) || a != b ? (T)1 : (T)0)

#define RIFTCO_SCALAR(name, expr)                                                      \
    KERNEL void name(GLOBAL TS* out ARG(0), GLOBAL const TS* x ARG(1),                   \
                     GLOBAL const int* P ARG(2), GLOBAL const T* F ARG(3) THREAD_ARGS) { \
        const int n = P[0];                                                            \
        const T s = F[0];                                                              \
        const int i = GID;                                                             \
        if (i < n) {                                                                   \
            const T v = LOAD(x, i);                                                    \
            STORE(out, i, (expr));                                                     \
        }                                                                              \
    }

RIFTCO_SCALAR(scalar_add, v + s)
RIFTCO_SCALAR(scalar_mul, v * s)

/* Exact power by squaring for integral exponents (sign of negative bases preserved;
 * specials follow from IEEE multiplication: inf * inf, 1 / 0, NaN * x). */
INLINE T riftco_ipow(T v, int e) {
    T r = (T)1;
    T b = v;
    int k = e < 0 ? -e : e;
    while (k > 0) {
        if (k & 1) r *= b;
        b *= b;
        k >>= 1;
    }
    return e < 0 ? ew_div((T)1, r) : r;
}

/* pow(v, s) with C99 Annex F's special cases (numpy's power) decided on bits; odd: s is
 * an odd integer, integer: s is an integer (both told by the host). Like numpy, v ** 0.5
 * is sqrt(v) (so (-inf) ** 0.5 is NaN and (-0) ** 0.5 is -0, where C's pow says +inf, +0). */
INLINE T riftco_pow(T v, T s, int integer, int odd) {
    /* every bit test of v and s comes before a float comparison of them */
    if (RIFTCO_ISNAN(s) || RIFTCO_ISNAN(v)) {
        /* pow(1, NaN) = 1 (pow(NaN, 0) = 1 is the integral path's) */
        return !RIFTCO_ISNAN(v) && !RIFTCO_ISINF(v) && v == (T)1.0 ? (T)1.0 : RIFTCO_NAN;
    }
    int neg = RIFTCO_SIGNBIT(v);
    if (RIFTCO_ISINF(s)) {
        int up = !RIFTCO_SIGNBIT(s);
        if (RIFTCO_ISINF(v)) return up ? RIFTCO_INF : (T)0.0;
        T a = fabs(v);
        if (a == (T)1.0) return (T)1.0;
        return (a > (T)1.0) == up ? RIFTCO_INF : (T)0.0;
    }
    if (RIFTCO_ISZERO(v) || RIFTCO_ISINF(v)) {
        if (s == (T)0.5) return ew_sqrt(v);
        /* |v|^s is 0 or inf; the sign is v's when s is an odd integer */
        int big = RIFTCO_ISZERO(v) == (s < (T)0.0);
        int negative = neg && odd;
        return big ? (negative ? RIFTCO_NEGINF : RIFTCO_INF) : (negative ? RIFTCO_NEGZERO : (T)0.0);
    }
    if (s == (T)0.5) return ew_sqrt(v);
    if (neg) {
        if (!integer) return RIFTCO_NAN;
        T r = PRECISE_POW(-v, s);
        return odd ? -r : r;
    }
    return PRECISE_POW(v, s);
}

/* P[1]: 1 = small integral exponent P[2] (exact, by squaring); otherwise pow(v, F[0]) with
 * P[1] = 0 (not an integer), 2 (an even integer), 3 (an odd integer). */
KERNEL void scalar_pow(GLOBAL TS* out ARG(0), GLOBAL const TS* x ARG(1),
                       GLOBAL const int* P ARG(2), GLOBAL const T* F ARG(3) THREAD_ARGS) {
    const int n = P[0];
    const int kind = P[1];
    const int e = P[2];
    const T s = F[0];
    const int i = GID;
    if (i < n) {
        const T v = LOAD(x, i);
        STORE(out, i, kind == 1 ? riftco_ipow(v, e) : riftco_pow(v, s, kind >= 2, kind == 3));
    }
}

/* cond != 0, where NaN counts as non-zero and -0.0 as zero: decided on bits. The chosen
 * element moves as stored (a half's NaN payload too). */
KERNEL void where_select(GLOBAL TS* out ARG(0), GLOBAL const TS* cond ARG(1),
                         GLOBAL const TS* x ARG(2), GLOBAL const TS* y ARG(3),
                         GLOBAL const int* P ARG(4) THREAD_ARGS) {
    const int n = P[0];
    const int i = GID;
    if (i < n) {
        out[i] = RIFTCO_ISZERO(LOAD(cond, i)) ? y[i] : x[i];
    }
}

/* y[r, c] += bias[c] in place, for rows of width P[1]: the bias epilogue of ``linear``
 * (one pass over y while it is still warm, instead of a broadcast copy plus an add). */
KERNEL void add_row_bias(GLOBAL TS* y ARG(0), GLOBAL const TS* bias ARG(1),
                         GLOBAL const int* P ARG(2) THREAD_ARGS) {
    const int n = P[0];
    const int cols = P[1];
    const int i = GID;
    if (i < n) {
        STORE(y, i, LOAD(y, i) + LOAD(bias, i % cols));
    }
}
