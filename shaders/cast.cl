/* Dtype conversion. The host defines SRC (source C type); T is the destination type.
 * Integer params P: [0] n. Buffers: out (T), x (SRC), P.
 *
 * float16 / bfloat16 (stored as ushort, half.h): the host names the conversion,
 * CAST_WIDEN (a half to float / double, exact) and/or CAST_NARROW (float / double to a
 * half, rounded once); half to half is both, through float32 (exact, then one rounding).
 *
 * Float to integer (the host defines CAST_LIMIT = 2^31 or 2^63 and CAST_MAX / CAST_MIN):
 * truncate toward zero, saturate at the integer type's range, NaN -> 0 (OpenCL's
 * convert_int_sat_rtz); C's plain conversion is undefined outside the range. NaN is
 * decided on bits (specials.h), infinities by comparing with the finite limits. Every
 * other conversion is C's: integer to float rounds to nearest, float to double exactly.
 */

#if defined(CAST_WIDEN) || defined(CAST_NARROW)
#include "half.h"
#endif

#if defined(CAST_WIDEN) && defined(CAST_NARROW)
#define cast_value(v) CAST_NARROW(CAST_WIDEN(v))
#elif defined(CAST_WIDEN)
#define cast_value(v) CAST_WIDEN(v)
#elif defined(CAST_NARROW)
#define cast_value(v) CAST_NARROW(v)
#elif defined(CAST_LIMIT)
INLINE T cast_value(SRC v) {
    if (RIFTCO_CAT(riftco_isnan_, SRC)(v)) return (T)0;
    if (v >= (SRC)CAST_LIMIT) return (T)CAST_MAX;
    if (v <= -(SRC)CAST_LIMIT) return (T)CAST_MIN;
    return (T)v;
}
#else
#define cast_value(v) ((T)(v))
#endif

KERNEL void cast_copy(GLOBAL T* out ARG(0), GLOBAL const SRC* x ARG(1),
                      GLOBAL const int* P ARG(2) THREAD_ARGS) {
    const int n = P[0];
    const int i = GID;
    if (i < n) {
        out[i] = cast_value(x[i]);
    }
}
