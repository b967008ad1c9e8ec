/* Memory-bound primitives for one dtype (included by kernels.c with T and F(name)):
 * elementwise arithmetic with a broadcast row, strided copies, concatenation and split
 * along the last axis. Each is one pass; above RIFT_PAR_MEM elements the rows are split
 * over the team (RIFT_PAR_MEM, kernels_blas.c; a 2-core VM has twice one core's cache
 * bandwidth). Results never depend
 * on the thread count: no element is computed by more than one thread.
 */

#ifndef RIFT_LAYOUT_ONCE /* this file is included once per dtype */
#define RIFT_LAYOUT_ONCE
enum { RIFT_ADD = 0, RIFT_SUB = 1, RIFT_MUL = 2, RIFT_DIV = 3 }; /* backend.py: _BINARY */
#endif

#define RIFT_BINARY_LOOP(expr)                                                              \
    for (int64_t r = lo; r < hi; r++) {                                                     \
        const T *x = a + r * sa, *y = b + r * sb;                                           \
        T *o = out + r * cols;                                                              \
        RIFT_SIMD                                                                           \
        for (int64_t j = 0; j < cols; j++) o[j] = expr;                                     \
    }

RIFT_CLONES static void F(binary_rows)(int op, const T *a, int64_t sa, const T *b, int64_t sb,
                                       T *out, int64_t lo, int64_t hi, int64_t cols) {
    switch (op) {
    case RIFT_ADD: RIFT_BINARY_LOOP(x[j] + y[j]) break;
    case RIFT_SUB: RIFT_BINARY_LOOP(x[j] - y[j]) break;
    case RIFT_MUL: RIFT_BINARY_LOOP(x[j] * y[j]) break;
    default: RIFT_BINARY_LOOP(x[j] / y[j]) break;
    }
}

/* out[rows x cols] = a op b, where row r of a starts at a + r*sa and of b at b + r*sb:
 * sa = cols for a dense operand, 0 for one row broadcast to every row (a bias). */
void F(binary)(int op, const T *a, int64_t sa, const T *b, int64_t sb, T *out, int64_t rows,
               int64_t cols) {
    int64_t chunk = cols > 0 ? (RIFT_CHUNK + cols - 1) / cols : rows;
    int64_t tasks = (rows + chunk - 1) / chunk;
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_MEM))
    for (int64_t t = 0; t < tasks; t++) {
        int64_t lo = t * chunk, hi = lo + chunk < rows ? lo + chunk : rows;
        F(binary_rows)(op, a, sa, b, sb, out, lo, hi, cols);
    }
}

/* out (dense) = the view of x with shape[4] and element strides st[4]: views of up to four
 * dimensions (the caller pads with leading ones), e.g. heads merged back into rows. */
void F(copy_view)(const T *x, const int64_t *shape, const int64_t *st, T *out) {
    int64_t n1 = shape[1], n2 = shape[2], n3 = shape[3];
    int64_t outer = shape[0] * n1 * n2;
    RIFT_PRAGMA(omp parallel for schedule(static) if (outer * n3 > RIFT_PAR_MEM))
    for (int64_t o = 0; o < outer; o++) {
        int64_t i2 = o % n2, i1 = (o / n2) % n1, i0 = o / (n1 * n2);
        const T *src = x + i0 * st[0] + i1 * st[1] + i2 * st[2];
        T *dst = out + o * n3;
        if (st[3] == 1) {
            memcpy(dst, src, sizeof(T) * (size_t)n3);
        } else {
            for (int64_t j = 0; j < n3; j++) dst[j] = src[j * st[3]];
        }
    }
}

/* out[rows x total] = the n pieces side by side; piece i has width[i] columns and row
 * stride ld[i] (a column slice of a wider matrix is read in place). */
void F(concat_cols)(int64_t n, const T *const *src, const int64_t *width, const int64_t *ld,
                    T *out, int64_t rows, int64_t total) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * total > RIFT_PAR_MEM))
    for (int64_t r = 0; r < rows; r++) {
        T *o = out + r * total;
        for (int64_t i = 0; i < n; i++) {
            memcpy(o, src[i] + r * ld[i], sizeof(T) * (size_t)width[i]);
            o += width[i];
        }
    }
}

/* The inverse: dst[i][rows x width[i]] (dense) = columns of x[rows x ...] (row stride ldx). */
void F(split_cols)(const T *x, int64_t ldx, int64_t rows, int64_t n, const int64_t *width,
                   T *const *dst) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * ldx > RIFT_PAR_MEM))
    for (int64_t r = 0; r < rows; r++) {
        const T *s = x + r * ldx;
        for (int64_t i = 0; i < n; i++) {
            memcpy(dst[i] + r * width[i], s, sizeof(T) * (size_t)width[i]);
            s += width[i];
        }
    }
}
