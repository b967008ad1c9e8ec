/* RMSNorm (op unit rms_norm), included by kernels.c after LayerNorm: y = x * rstd * g with
 * rstd = 1 / sqrt(mean(x^2) + eps); backward dx per row and dgamma from per-block partials
 * of RIFT_LN_ROWS rows summed pairwise (colsum), so the order is thread-free like
 * LayerNorm's. */

RIFT_CLONES static void F(rms_row)(const T *x, const T *g, T *y, T *rstd, int64_t n, T eps) {
    T s = 0;
    RIFT_SIMD_SUM(s)
    for (int64_t j = 0; j < n; j++) s += x[j] * x[j];
    T r = (T)1 / RIFT_SQRT(s / (T)n + eps);
    RIFT_SIMD
    for (int64_t j = 0; j < n; j++) y[j] = x[j] * r * g[j];
    *rstd = r;
}

void F(rms_norm)(const T *x, const T *g, T *y, T *rstd, int64_t rows, int64_t cols,
                 double eps) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_ROWS))
    for (int64_t r = 0; r < rows; r++)
        F(rms_row)(x + r * cols, g, y + r * cols, rstd + r, cols, (T)eps);
}

/* dx for rows [lo, hi) and this block's partial dgamma (rows in order). */
RIFT_CLONES static void F(rms_bwd_rows)(const T *dy, const T *x, const T *g, const T *rstd,
                                        T *dx, T *pg, int64_t lo, int64_t hi, int64_t n) {
    for (int64_t j = 0; j < n; j++) pg[j] = 0;
    for (int64_t r = lo; r < hi; r++) {
        const T *dyr = dy + r * n, *xr = x + r * n;
        T *dxr = dx + r * n;
        T rs = rstd[r], s = 0;
        RIFT_SIMD_SUM(s)
        for (int64_t j = 0; j < n; j++) s += dyr[j] * g[j] * (xr[j] * rs);
        T m = s / (T)n;
        RIFT_SIMD
        for (int64_t j = 0; j < n; j++) {
            T xh = xr[j] * rs;
            dxr[j] = rs * (dyr[j] * g[j] - xh * m);
            pg[j] += dyr[j] * xh;
        }
    }
}

/* Returns 0, or -1 when scratch memory could not be allocated. */
int F(rms_norm_backward)(const T *dy, const T *x, const T *g, const T *rstd, T *dx, T *dg,
                         int64_t rows, int64_t cols) {
    int64_t blocks = (rows + RIFT_LN_ROWS - 1) / RIFT_LN_ROWS;
    if (blocks == 0) blocks = 1;
    T *part = (T *)rift_alloc(sizeof(T) * (size_t)(blocks * cols));
    if (!part) return -1;
    if (rows == 0) memset(part, 0, sizeof(T) * (size_t)cols);
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_ROWS))
    for (int64_t k = 0; k < blocks; k++) {
        int64_t lo = k * RIFT_LN_ROWS, hi = lo + RIFT_LN_ROWS < rows ? lo + RIFT_LN_ROWS : rows;
        F(rms_bwd_rows)(dy, x, g, rstd, dx, part + k * cols, lo, hi, cols);
    }
    int status = F(colsum)(part, blocks, cols, cols, dg);
    free(part);
    return status;
}
