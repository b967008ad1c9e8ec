/* Dtype conversion. The host defines SRC (source C type); T is the destination type.
 * Float to int truncates toward zero (C conversion rules in both languages).
 * Integer params P: [0] n. Buffers: out (T), x (SRC), P.
 */

KERNEL void cast_copy(GLOBAL T* out ARG(0), GLOBAL const SRC* x ARG(1),
                      GLOBAL const int* P ARG(2) THREAD_ARGS) {
    const int n = P[0];
    const int i = GID; if (i < n) {
        out[i] = (T)x[i];
    }
}
