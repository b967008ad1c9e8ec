/* GELU forward and backward, both forms, elementwise with a grid-stride loop.
 *
 * Integer params P: [0] n elements, [1] form (0 = "tanh", 1 = "none" / exact erf).
 * Metal has no erf, so the exact form carries its own standard normal CDF: a series with
 * only positive terms for |z| < 2 (no cancellation) and a continued fraction for the
 * tail (so tiny CDF values keep their relative accuracy). Both are good to ~1e-15 in
 * double and to rounding in float.
 *
 * Specials are decided on the loaded input's bits (specials.h), as the formulas evaluate
 * in IEEE arithmetic (and the CPU reference gives): gelu(NaN) = NaN, gelu(+inf) = +inf,
 * gelu(-inf) = -inf * 0 = NaN; the derivative at NaN or +-inf is NaN. For huge finite
 * inputs (|x|^3 overflows) exp's argument is clamped (rs_exp) and the derivative's tail
 * term is selected away when its factor e^-2|u| is 0; the erf form clamps |x| to
 * GELU_CLAMP (beyond it the CDF is exactly 0 or 1), keeping inf out of its divisions.
 */

#include "specials.h"

/* GELU_X_WIDEN (defined by the host as one of half.h's widenings, e.g.
 * riftco_bf16_to_float): the backwards read x as its 2-byte bits and widen each element on
 * load, exactly, so a float32 GELU backward needs no float32 copy of a half input (the
 * half linear_gelu_backward's H: core/kernel_host/half_linear.py). */
#ifdef GELU_X_WIDEN
#include "half.h"
#define GELU_XT ushort
#define GELU_LOAD_X(i) GELU_X_WIDEN(x[i])
#else
#define GELU_XT T
#define GELU_LOAD_X(i) x[i]
#endif

#define GELU_SQRT_2_OVER_PI ((T)0.79788456080286535588)
#define GELU_INV_SQRT_2 ((T)0.70710678118654752440)
#define GELU_INV_SQRT_PI ((T)0.56418958354775628695)
#define GELU_INV_SQRT_2PI ((T)0.39894228040143267794)
/* Series cut-off and continued-fraction depth: enough for the element type, no more. */
#define GELU_SERIES_TOL ((T)(sizeof(T) == 8 ? 1e-17 : 1e-8))
#define GELU_CF_DEPTH (sizeof(T) == 8 ? 60 : 24)
#define GELU_CLAMP ((T)1e6)

/* gelu at a non-finite input (NaN, +inf: itself; -inf: NaN), and the derivative there. */
INLINE T gelu_special(T v) {
    return RIFTCO_ISNEGINF(v) ? RIFTCO_NAN : v;
}

/* Phi(x) = 0.5 * (1 + erf(x / sqrt 2)), the standard normal CDF. */
INLINE T gelu_normal_cdf(T x) {
    T z = fmin(fabs(x), GELU_CLAMP) * GELU_INV_SQRT_2;
    T ez = rs_exp(-z * z);
    if (z < (T)2.0) {
        /* erf(z) = 2/sqrt(pi) e^{-z^2} sum_n 2^n z^{2n+1} / (1*3*...*(2n+1)) */
        T term = z;
        T sum = z;
        for (int n = 0; n < 60; n++) {
            term *= (T)2.0 * z * z / (T)(2 * n + 3);
            sum += term;
            if (term <= sum * GELU_SERIES_TOL) {
                break;
            }
        }
        T e = (T)2.0 * GELU_INV_SQRT_PI * ez * sum;
        return x >= (T)0.0 ? (T)0.5 + (T)0.5 * e : (T)0.5 - (T)0.5 * e;
    }
    /* erfc(z) = e^{-z^2}/sqrt(pi) / (z + (1/2)/(z + 1/(z + (3/2)/(z + ...)))) */
    T k = (T)0.0;
    for (int n = GELU_CF_DEPTH; n > 0; n--) {
        k = ((T)n * (T)0.5) / (z + k);
    }
    T half_erfc = (T)0.5 * GELU_INV_SQRT_PI * ez / (z + k);
    return x >= (T)0.0 ? (T)1.0 - half_erfc : half_erfc;
}

/* The "tanh" form as a logistic: 0.5 (1 + tanh u) = 1 / (1 + e^{-2u}). With e = e^{-2|u|}
 * (never overflows) both the value and the derivative avoid 1 - tanh^2 cancellation,
 * which library tanh (a few ulp off near +-1) would amplify by x^3 in the backward. */
INLINE T gelu_tanh_inner(T v) {
    return GELU_SQRT_2_OVER_PI * (v + (T)0.044715 * v * v * v);
}

INLINE T gelu_tanh_gate(T u, T e) {
    return u >= (T)0.0 ? (T)1.0 / ((T)1.0 + e) : e / ((T)1.0 + e);
}

/* The tanh form alone, one element per thread and no loop: a CPU OpenCL compiler (PoCL)
 * vectorises such a kernel across threads (exp included), which a grid-stride loop or the
 * erf form's series would prevent. The host launches n threads for form 0. */
KERNEL void gelu_tanh_forward(GLOBAL T* y ARG(0), GLOBAL const T* x ARG(1),
                              GLOBAL const int* P ARG(2) THREAD_ARGS) {
    int i = GID;
    if (i < P[0]) {
        T v = x[i];
        T u = gelu_tanh_inner(v);
        T g = v * gelu_tanh_gate(u, rs_exp((T)-2.0 * fabs(u)));
        y[i] = RIFTCO_ISFINITE(v) ? g : gelu_special(v);
    }
}

/* d/dv [v s(2u)] = s + 2 v u' s (1 - s), and s (1 - s) = e / (1 + e)^2 */
INLINE T gelu_tanh_grad(T v) {
    T u = gelu_tanh_inner(v);
    T e = rs_exp((T)-2.0 * fabs(u));
    T q = e / (((T)1.0 + e) * ((T)1.0 + e));
    T du = GELU_SQRT_2_OVER_PI * ((T)1.0 + (T)(3.0 * 0.044715) * v * v);
    T g = gelu_tanh_gate(u, e) + (q == (T)0.0 ? (T)0.0 : (T)2.0 * v * du * q);
    return RIFTCO_ISFINITE(v) ? g : RIFTCO_NAN;
}

KERNEL void gelu_tanh_backward(GLOBAL T* dx ARG(0), GLOBAL const T* dy ARG(1),
                               GLOBAL const GELU_XT* x ARG(2),
                               GLOBAL const int* P ARG(3) THREAD_ARGS) {
    int i = GID;
    if (i < P[0]) {
        dx[i] = dy[i] * gelu_tanh_grad(GELU_LOAD_X(i));
    }
}

KERNEL void gelu_forward(GLOBAL T* y ARG(0), GLOBAL const T* x ARG(1),
                         GLOBAL const int* P ARG(2) THREAD_ARGS) {
    int n = P[0];
    int form = P[1];
    for (int i = GID; i < n; i += GLOBAL_SIZE) {
        T v = x[i];
        T g;
        if (form == 0) {
            T u = gelu_tanh_inner(v);
            g = v * gelu_tanh_gate(u, rs_exp((T)-2.0 * fabs(u)));
        } else {
            g = v * gelu_normal_cdf(v);
        }
        y[i] = RIFTCO_ISFINITE(v) ? g : gelu_special(v);
    }
}

KERNEL void gelu_backward(GLOBAL T* dx ARG(0), GLOBAL const T* dy ARG(1),
                          GLOBAL const GELU_XT* x ARG(2), GLOBAL const int* P ARG(3) THREAD_ARGS) {
    int n = P[0];
    int form = P[1];
    for (int i = GID; i < n; i += GLOBAL_SIZE) {
        T v = GELU_LOAD_X(i);
        T g;
        if (form == 0) {
            g = gelu_tanh_grad(v);
        } else {
            T pdf = GELU_INV_SQRT_2PI * rs_exp((T)-0.5 * v * v);
            g = RIFTCO_ISFINITE(v) ? gelu_normal_cdf(v) + v * pdf : RIFTCO_NAN;
        }
        dx[i] = dy[i] * g;
    }
}

/* The epilogue of linear_gelu (op unit riftco.ops.fused.linear_gelu) after the host's
 * product h = x @ weight: h[r, c] += bias[c] in place (the saved pre-activation) and
 * y = gelu(h), one thread per element, in one pass over h while it is still warm, where
 * linear then gelu take two (add_row_bias, then the GELU kernel reading h back).
 * Integer params P: [0] n elements, [1] cols (bias length). The tanh form has a kernel of
 * its own with no branch on the form, so that PoCL vectorises it across threads as it does
 * gelu_tanh_forward. */
INLINE T linear_gelu_bias(GLOBAL T* h, GLOBAL const T* bias, int i, int cols) {
    T v = h[i] + bias[i % cols];
    h[i] = v;
    return v;
}

KERNEL void linear_gelu_tanh_epilogue(GLOBAL T* y ARG(0), GLOBAL T* h ARG(1),
                                      GLOBAL const T* bias ARG(2),
                                      GLOBAL const int* P ARG(3) THREAD_ARGS) {
    int i = GID;
    if (i < P[0]) {
        T v = linear_gelu_bias(h, bias, i, P[1]);
        T u = gelu_tanh_inner(v);
        T g = v * gelu_tanh_gate(u, rs_exp((T)-2.0 * fabs(u)));
        y[i] = RIFTCO_ISFINITE(v) ? g : gelu_special(v);
    }
}

KERNEL void linear_gelu_erf_epilogue(GLOBAL T* y ARG(0), GLOBAL T* h ARG(1),
                                     GLOBAL const T* bias ARG(2),
                                     GLOBAL const int* P ARG(3) THREAD_ARGS) {
    int i = GID;
    if (i < P[0]) {
        T v = linear_gelu_bias(h, bias, i, P[1]);
        T g = v * gelu_normal_cdf(v);
        y[i] = RIFTCO_ISFINITE(v) ? g : gelu_special(v);
    }
}
