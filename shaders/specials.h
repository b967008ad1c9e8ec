/* IEEE special values without IEEE comparisons: helpers over the element type T.
 *
 * Included after the type defines (the prelude cannot use T). Everything here decides by
 * the bit-pattern tests of prelude.h, and no infinity or NaN is fed to exp.
 *
 * Test values loaded from memory (kernel inputs, or scores a kernel stored and reloaded):
 * fast math lets a compiler assume that the result of a float operation is neither NaN
 * nor infinite, so a class test of a freshly computed value could in principle be folded
 * (LLVM knows bit tests as is.fpclass); a loaded value carries no such assumption.
 */
#ifndef RIFTCO_SPECIALS_H
#define RIFTCO_SPECIALS_H

/* What an entry contributes to a softmax-like row (classes OR-ed over the row):
 * RS_FINITE: a finite entry (the row has a usable maximum); RS_POISON: NaN or +inf (the IEEE
 * result is NaN for the whole row: +inf - +inf); -inf contributes nothing (class 0).
 * A row is normal exactly when its classes OR to RS_FINITE. */
#define RS_FINITE 1
#define RS_POISON 2

INLINE int rs_class(T v) {
    return RIFTCO_ISFINITE(v) ? RS_FINITE : (RIFTCO_ISNEGINF(v) ? 0 : RS_POISON);
}

/* exp of a finite difference that may be hugely negative (or overflow to -inf): the clamp
 * keeps -inf away from exp and changes nothing (exp(RIFTCO_EXP_FLOOR) is 0 in T). */
INLINE T rs_exp(T d) {
    return PRECISE_EXP(fmax(d, RIFTCO_EXP_FLOOR));
}

/* x * 2^k for a normal x whose result is normal too, on the exponent bits: an integer
 * add that fast math cannot reassociate with the division around it (ew_div). */
INLINE float rs_scale2_float(float x, int k) {
    return RIFTCO_F32_FROM_BITS(RIFTCO_F32_BITS(x) + ((uint)k << 23));
}
#if defined(RIFTCO_FP64)
INLINE double rs_scale2_double(double x, int k) {
    return RIFTCO_F64_FROM_BITS(RIFTCO_F64_BITS(x) + ((ulong)(long)k << 52));
}
#endif
#define RS_SCALE2(x, k) RIFTCO_CAT(rs_scale2_, T)(x, k)

/* exp(a - b) with IEEE's answers for special operands, decided on bit patterns. */
INLINE T rs_exp_diff(T a, T b) {
    if (RIFTCO_ISFINITE(a) && RIFTCO_ISFINITE(b)) {
        return rs_exp(a - b);
    }
    if (RIFTCO_ISNAN(a) || RIFTCO_ISNAN(b)) {
        return RIFTCO_NAN;
    }
    /* at least one infinity: inf - inf (same sign) is NaN; a = +inf or b = -inf gives inf */
    int a_pos = RIFTCO_ISPOSINF(a);
    int a_neg = RIFTCO_ISNEGINF(a);
    int b_pos = RIFTCO_ISPOSINF(b);
    int b_neg = RIFTCO_ISNEGINF(b);
    if ((a_pos && b_pos) || (a_neg && b_neg)) {
        return RIFTCO_NAN;
    }
    return (a_pos || b_neg) ? RIFTCO_INF : (T)0.0;
}

/* Blocked accumulation for long sequential sums (SEMANTICS.md: error ~ log n, not n).
 * Values go into b0; every 32 adds b0 moves into b1, every 32 of those b1 into b2, every
 * 32 of those b2 into b3: each level adds at most 32 terms (up to 32^4 values, then b3
 * grows), in a fixed order, so the result is deterministic. A sum of at most 32 values is
 * bit-for-bit the plain sequential sum. */
typedef struct {
    T b0;
    T b1;
    T b2;
    T b3;
    int n;
} BlockSum;

INLINE BlockSum bsum_init(T first) {
    BlockSum s;
    s.b0 = first;
    s.b1 = (T)0.0;
    s.b2 = (T)0.0;
    s.b3 = (T)0.0;
    s.n = 0;
    return s;
}

INLINE BlockSum bsum_add(BlockSum s, T v) {
    s.b0 += v;
    s.n += 1;
    if ((s.n & 31) == 0) {
        s.b1 += s.b0;
        s.b0 = (T)0.0;
        if ((s.n & 1023) == 0) {
            s.b2 += s.b1;
            s.b1 = (T)0.0;
            if ((s.n & 32767) == 0) {
                s.b3 += s.b2;
                s.b2 = (T)0.0;
            }
        }
    }
    return s;
}

INLINE T bsum_total(BlockSum s) {
    return s.b3 + (s.b2 + (s.b1 + s.b0));
}

#endif /* RIFTCO_SPECIALS_H */
