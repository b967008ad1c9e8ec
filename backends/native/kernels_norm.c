/* The residual add fused with LayerNorm (op unit add_layer_norm), included by kernels.c
 * after its LayerNorm so both reuse ln_row and ln_bwd_rows: the fused op gives the bits of
 * the unfused add + layer_norm (and layer_norm_backward + add) it replaces.
 * The sums are their own loops: never contracted into a neighbouring product (an FMA
 * would round differently from the unfused add). */

RIFT_CLONES static void F(add_row)(const T *a, const T *b, T *out, int64_t n) {
    RIFT_SIMD
    for (int64_t j = 0; j < n; j++) out[j] = a[j] + b[j];
}

/* s = x + res, then LayerNorm of s, row by row while the row is in cache. */
void F(add_layer_norm)(const T *x, const T *res, const T *g, const T *b, T *s, T *y, T *mean,
                       T *rstd, int64_t rows, int64_t cols, double eps) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_ROWS))
    for (int64_t r = 0; r < rows; r++) {
        F(add_row)(x + r * cols, res + r * cols, s + r * cols, cols);
        F(ln_row)(s + r * cols, g, b, y + r * cols, mean + r, rstd + r, cols, (T)eps);
    }
}

/* layer_norm_backward's blocks, each block's dx then folded with the stream's gradient ds
 * (dsum = ds + dx) before the next block. Returns 0, or -1 when scratch memory could not
 * be allocated. */
int F(add_layer_norm_backward)(const T *dy, const T *ds, const T *s, const T *g, const T *mean,
                               const T *rstd, T *dsum, T *dg, T *db, int64_t rows,
                               int64_t cols) {
    int64_t blocks = (rows + RIFT_LN_ROWS - 1) / RIFT_LN_ROWS;
    if (blocks == 0) blocks = 1;
    T *part = (T *)rift_alloc(sizeof(T) * (size_t)(2 * blocks * cols));
    if (!part) return -1;
    if (rows == 0) memset(part, 0, sizeof(T) * (size_t)(2 * cols));
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_ROWS))
    for (int64_t k = 0; k < blocks; k++) {
        int64_t lo = k * RIFT_LN_ROWS, hi = lo + RIFT_LN_ROWS < rows ? lo + RIFT_LN_ROWS : rows;
        F(ln_bwd_rows)(dy, s, g, mean, rstd, dsum, part + 2 * k * cols, part + (2 * k + 1) * cols,
                       lo, hi, cols);
        F(add_row)(ds + lo * cols, dsum + lo * cols, dsum + lo * cols, (hi - lo) * cols);
    }
    int status = F(colsum)(part, blocks, cols, 2 * cols, dg);
    status |= F(colsum)(part + cols, blocks, cols, 2 * cols, db);
    free(part);
    return status;
}
