/* Reductions: sum and max over rows or columns of a dense matrix, and argmax over rows.
 *
 * The host collapses the reduced axes into the last (rows kernels) or first (cols
 * kernels) dimension; anything else it permutes first with copy_strided.
 *
 * Row kernels (`*_rows`): one threadgroup per row, grid-stride over rows, any group size
 * up to 1024 (the tree below handles sizes that are not powers of two).
 * Small-row kernels (`*_rows_small`): one thread per row, for short rows.
 * Column kernels (`*_cols`): x is [rows, cols]; thread t sums column t % cols over the
 * row chunk t / cols (so a long reduced axis can be split over many threads and finished
 * by a second launch).
 * P rows kernels: [0] rows, [1] cols. P cols kernels: [0] rows, [1] cols, [2] chunk.
 *
 * Max and argmax need no -inf sentinel: every partial starts from a real element of its
 * row or chunk (max is idempotent, and argmax's tie rule prefers the smaller index, so
 * element 0 counted twice changes nothing). NaN is found by bits (specials.h), never by
 * a != a, which fast math may fold to false. Sums are IEEE arithmetic, and every long
 * sequential run is summed in blocks (BlockSum in specials.h), so a million-row column
 * sum errs by a few dozen ulp, not thousands; the group trees are pairwise already.
 */

#include "specials.h"

#define RIFTCO_REDUCE_MAX_GROUP 1024

INLINE T riftco_add(T a, T b) { return a + b; }
/* Propagates NaN like numpy's max. */
INLINE T riftco_max(T a, T b) { return RIFTCO_ISNAN(a) || (!RIFTCO_ISNAN(b) && a > b) ? a : b; }

/* Tree reduction over a threadgroup of any size; every thread gets the result.
 * All threads of the group must call it (it holds barriers). */
#define RIFTCO_GROUP_REDUCE(fname, combine)                                            \
    INLINE T fname(LOCAL_PTR T* buf, T v, int lid, int gsize) {                          \
        buf[lid] = v;                                                                  \
        BARRIER();                                                                     \
        int p = 1;                                                                     \
        while (p < gsize) p <<= 1;                                                     \
        for (int s = p >> 1; s > 0; s >>= 1) {                                         \
            if (lid < s && lid + s < gsize) buf[lid] = combine(buf[lid], buf[lid + s]); \
            BARRIER();                                                                 \
        }                                                                              \
        const T r = buf[0];                                                            \
        BARRIER();                                                                     \
        return r;                                                                      \
    }

RIFTCO_GROUP_REDUCE(riftco_group_sum, riftco_add)
RIFTCO_GROUP_REDUCE(riftco_group_max, riftco_max)

/* Per-thread accumulators: a blocked sum, or a running max started from a real element
 * (xs[first]: the first element of the thread's row or chunk). */
INLINE BlockSum sum_acc_init(GLOBAL const T* xs, int first) { return bsum_init((T)0.0); }
INLINE BlockSum sum_acc_add(BlockSum s, T v) { return bsum_add(s, v); }
INLINE T sum_acc_total(BlockSum s) { return bsum_total(s); }
INLINE BlockSum max_acc_init(GLOBAL const T* xs, int first) { return bsum_init(xs[first]); }
INLINE BlockSum max_acc_add(BlockSum s, T v) {
    s.b0 = riftco_max(s.b0, v);
    return s;
}
INLINE T max_acc_total(BlockSum s) { return s.b0; }

#define RIFTCO_REDUCE_KERNELS(op, group_fn)                                            \
    KERNEL void op##_rows(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),              \
                          GLOBAL const int* P ARG(2) THREAD_ARGS) {                    \
        LOCAL T buf[RIFTCO_REDUCE_MAX_GROUP];                                          \
        const int rows = P[0];                                                         \
        const int cols = P[1];                                                         \
        for (int row = GROUP_ID; row < rows; row += NUM_GROUPS) {                      \
            GLOBAL const T* xr = x + (long)row * cols;                                 \
            BlockSum acc = op##_acc_init(xr, 0);                                       \
            for (int c = LID; c < cols; c += GROUP_SIZE) acc = op##_acc_add(acc, xr[c]); \
            T total = group_fn(buf, op##_acc_total(acc), LID, GROUP_SIZE);             \
            if (LID == 0) out[row] = total;                                            \
        }                                                                              \
    }                                                                                  \
    KERNEL void op##_rows_small(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),        \
                                GLOBAL const int* P ARG(2) THREAD_ARGS) {              \
        const int rows = P[0];                                                         \
        const int cols = P[1];                                                         \
        for (int row = GID; row < rows; row += GLOBAL_SIZE) {                          \
            GLOBAL const T* xr = x + (long)row * cols;                                 \
            BlockSum acc = op##_acc_init(xr, 0);                                       \
            for (int c = 0; c < cols; ++c) acc = op##_acc_add(acc, xr[c]);             \
            out[row] = op##_acc_total(acc);                                            \
        }                                                                              \
    }                                                                                  \
    KERNEL void op##_cols(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),              \
                          GLOBAL const int* P ARG(2) THREAD_ARGS) {                    \
        const int rows = P[0];                                                         \
        const int cols = P[1];                                                         \
        const int chunk = P[2];                                                        \
        const int n = ((rows + chunk - 1) / chunk) * cols;                             \
        for (int t = GID; t < n; t += GLOBAL_SIZE) {                                   \
            const int col = t % cols;                                                  \
            const int part = t / cols;                                                 \
            const int r1 = min(rows, (part + 1) * chunk);                              \
            BlockSum acc = op##_acc_init(x, part * chunk * cols + col);                \
            for (int r = part * chunk; r < r1; ++r) {                                  \
                acc = op##_acc_add(acc, x[(long)r * cols + col]);                      \
            }                                                                          \
            out[t] = op##_acc_total(acc);                                              \
        }                                                                              \
    }

RIFTCO_REDUCE_KERNELS(sum, riftco_group_sum)
RIFTCO_REDUCE_KERNELS(max, riftco_group_max)

/* (value, index) is better than (w, j) when larger, or equal with a smaller index; NaN
 * counts as largest (numpy returns the first NaN). */
INLINE bool riftco_arg_better(T v, int i, T w, int j) {
    if (RIFTCO_ISNAN(v)) return !RIFTCO_ISNAN(w) || i < j;
    if (RIFTCO_ISNAN(w)) return false;
    return v > w || (v == w && i < j);
}

/* out[row] = first index of the row maximum (int32). P: [0] rows, [1] cols. */
KERNEL void argmax_rows(GLOBAL int* out ARG(0), GLOBAL const T* x ARG(1),
                        GLOBAL const int* P ARG(2) THREAD_ARGS) {
    LOCAL T vbuf[RIFTCO_REDUCE_MAX_GROUP];
    LOCAL int ibuf[RIFTCO_REDUCE_MAX_GROUP];
    const int rows = P[0];
    const int cols = P[1];
    const int lid = LID;
    const int gsize = GROUP_SIZE;
    for (int row = GROUP_ID; row < rows; row += NUM_GROUPS) {
        GLOBAL const T* xr = x + row * cols;
        T best = xr[0]; /* a real candidate: no -inf sentinel */
        int besti = 0;
        for (int c = lid; c < cols; c += gsize) {
            if (riftco_arg_better(xr[c], c, best, besti)) {
                best = xr[c];
                besti = c;
            }
        }
        vbuf[lid] = best;
        ibuf[lid] = besti;
        BARRIER();
        int p = 1;
        while (p < gsize) p <<= 1;
        for (int s = p >> 1; s > 0; s >>= 1) {
            if (lid < s && lid + s < gsize &&
                riftco_arg_better(vbuf[lid + s], ibuf[lid + s], vbuf[lid], ibuf[lid])) {
                vbuf[lid] = vbuf[lid + s];
                ibuf[lid] = ibuf[lid + s];
            }
            BARRIER();
        }
        if (lid == 0) out[row] = ibuf[0];
        BARRIER();
    }
}
