/* The residual add fused with LayerNorm (op unit add_layer_norm), included by kernels.c
 * after its LayerNorm so both reuse its row workers (ln_row, add_row, ln_backward): the
 * fused op gives the bits of the unfused add + layer_norm (and layer_norm_backward + add)
 * it replaces. */

/* s = x + res, then LayerNorm of s, row by row while the row is in cache. */
void F(add_layer_norm)(const T *x, const T *res, const T *g, const T *b, T *s, T *y, T *mean,
                       T *rstd, int64_t rows, int64_t cols, double eps) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_ROWS))
    for (int64_t r = 0; r < rows; r++) {
        F(add_row)(x + r * cols, res + r * cols, s + r * cols, cols);
        F(ln_row)(s + r * cols, g, b, y + r * cols, mean + r, rstd + r, cols, (T)eps);
    }
}

/* layer_norm_backward with each block's dx folded into the stream's gradient ds. Returns
 * 0, or -1 when scratch memory could not be allocated. */
int F(add_layer_norm_backward)(const T *dy, const T *ds, const T *s, const T *g, const T *mean,
                               const T *rstd, T *dsum, T *dg, T *db, int64_t rows,
                               int64_t cols) {
    return F(ln_backward)(dy, s, g, mean, rstd, ds, dsum, dg, db, rows, cols);
}
