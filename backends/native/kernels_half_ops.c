/* Ops on float16/bfloat16 storage that compute in float32 (included once by kernels.c,
 * after kernels_half.c): each row or segment is widened into a float32 scratch buffer,
 * run through the float32 kernel's own worker (the same arithmetic, in the same order, as
 * the widened path core takes through float32), and rounded once on the way out. One
 * pass over 2-byte memory instead of the widened path's cast in, op, cast out.
 *
 * Returns 0, or -1 when a thread's scratch could not be allocated (nothing is then
 * promised about the output; the caller raises before anyone sees it).
 */

/* Columns per float32 segment of the elementwise kernel (two inputs and one output live
 * on the stack). */
#define RIFT_HALF_SEG 1024

/* out[rows x cols] = a op b (kernels_layout.c's binary, 2-byte operands): row r of a at
 * a + r*sa, of b at b + r*sb (0: one row broadcast). */
void half_binary(int op, const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb,
                 uint16_t *out, int64_t rows, int64_t cols, int kind, int f16c) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_MEM))
    for (int64_t r = 0; r < rows; r++) {
        float wa[RIFT_HALF_SEG], wb[RIFT_HALF_SEG], wo[RIFT_HALF_SEG];
        for (int64_t j = 0; j < cols; j += RIFT_HALF_SEG) {
            int64_t len = cols - j < RIFT_HALF_SEG ? cols - j : RIFT_HALF_SEG;
            rift_to_f32_chunk(a + r * sa + j, wa, len, kind, f16c);
            rift_to_f32_chunk(b + r * sb + j, wb, len, kind, f16c);
            binary_rows_f32(op, wa, 0, wb, 0, wo, 0, 1, len);
            rift_from_f32_chunk(wo, out + r * cols + j, len, kind, f16c);
        }
    }
}

RIFT_CLONES static void rift_scalar_f32(int op, float *w, int64_t n, float v) {
    if (op == RIFT_MUL) {
        RIFT_SIMD
        for (int64_t i = 0; i < n; i++) w[i] *= v;
    } else {
        RIFT_SIMD
        for (int64_t i = 0; i < n; i++) w[i] += v;
    }
}

/* y = x + v or x * v (op RIFT_ADD or RIFT_MUL), v the float32 the widened path uses. */
void half_scalar(int op, const uint16_t *x, uint16_t *y, int64_t n, float v, int kind,
                 int f16c) {
    RIFT_HALF_EACH_CHUNK(n, RIFT_PAR_MEM, {
        float w[RIFT_HALF_CHUNK];
        rift_to_f32_chunk(x + lo, w, len, kind, f16c);
        rift_scalar_f32(op, w, len, v);
        rift_from_f32_chunk(w, y + lo, len, kind, f16c);
    });
}

/* Two 2-byte rows of `cols` widened into w[0, cols) and w[cols, 2 cols). */
static void rift_widen_rows(const uint16_t *a, const uint16_t *b, float *w, int64_t cols,
                            int kind, int f16c) {
    rift_to_f32_chunk(a, w, cols, kind, f16c);
    rift_to_f32_chunk(b, w + cols, cols, kind, f16c);
}

/* A float32 row buffer per thread: every thread reaches the worksharing loop (OpenMP
 * requires it) and one without a buffer only records the failure. */
#define RIFT_HALF_ROWS(rows, cols, width, ...)                                             \
    do {                                                                                    \
        RIFT_PRAGMA(omp parallel if ((rows) * (cols) > RIFT_PAR_ROWS))                      \
        {                                                                                   \
            float *w = (float *)rift_alloc(sizeof(float) * (size_t)(width));                \
            if (!w) {                                                                       \
                RIFT_PRAGMA(omp atomic write)                                               \
                status = -1;                                                                \
            }                                                                               \
            RIFT_PRAGMA(omp for schedule(static))                                           \
            for (int64_t r = 0; r < (rows); r++) {                                          \
                if (w) __VA_ARGS__                                                          \
            }                                                                               \
            free(w);                                                                        \
        }                                                                                   \
    } while (0)

int half_softmax(const uint16_t *x, uint16_t *y, int64_t rows, int64_t cols, int kind,
                 int f16c) {
    int status = 0;
    RIFT_HALF_ROWS(rows, cols, cols, {
        rift_to_f32_chunk(x + r * cols, w, cols, kind, f16c);
        softmax_row_f32(w, w, cols);
        rift_from_f32_chunk(w, y + r * cols, cols, kind, f16c);
    });
    return status;
}

int half_softmax_backward(const uint16_t *dy, const uint16_t *y, uint16_t *dx, int64_t rows,
                          int64_t cols, int kind, int f16c) {
    int status = 0;
    RIFT_HALF_ROWS(rows, cols, 2 * cols, {
        rift_widen_rows(dy + r * cols, y + r * cols, w, cols, kind, f16c);
        softmax_bwd_row_f32(w, w + cols, w, cols);
        rift_from_f32_chunk(w, dx + r * cols, cols, kind, f16c);
    });
    return status;
}

/* GELU and its backward, chunk by chunk through float32 stack buffers. */
void half_gelu(const uint16_t *x, uint16_t *y, int64_t n, int approx, int kind, int f16c) {
    RIFT_HALF_EACH_CHUNK(n, RIFT_PAR_MIN, {
        float w[RIFT_HALF_CHUNK];
        rift_to_f32_chunk(x + lo, w, len, kind, f16c);
        gelu_chunk_f32(w, w, len, approx);
        rift_from_f32_chunk(w, y + lo, len, kind, f16c);
    });
}

void half_gelu_backward(const uint16_t *dy, const uint16_t *x, uint16_t *dx, int64_t n,
                        int approx, int kind, int f16c) {
    RIFT_HALF_EACH_CHUNK(n, RIFT_PAR_MIN, {
        float wd[RIFT_HALF_CHUNK], wx[RIFT_HALF_CHUNK];
        rift_to_f32_chunk(dy + lo, wd, len, kind, f16c);
        rift_to_f32_chunk(x + lo, wx, len, kind, f16c);
        gelu_bwd_chunk_f32(wd, wx, wd, len, approx);
        rift_from_f32_chunk(wd, dx + lo, len, kind, f16c);
    });
}

/* y in the 2-byte dtype; mean and rstd stay float32 (HALF_SPEC: statistics of a
 * low-precision LayerNorm are float32 outputs, the backward reads them as they are). */
int half_layer_norm(const uint16_t *x, const uint16_t *g, const uint16_t *b, uint16_t *y,
                    float *mean, float *rstd, int64_t rows, int64_t cols, double eps, int kind,
                    int f16c) {
    float *gb = (float *)rift_alloc(sizeof(float) * (size_t)(2 * cols + 1));
    if (!gb) return -1;
    rift_widen_rows(g, b, gb, cols, kind, f16c);
    int status = 0;
    RIFT_HALF_ROWS(rows, cols, cols, {
        rift_to_f32_chunk(x + r * cols, w, cols, kind, f16c);
        ln_row_f32(w, gb, gb + cols, w, mean + r, rstd + r, cols, (float)eps);
        rift_from_f32_chunk(w, y + r * cols, cols, kind, f16c);
    });
    free(gb);
    return status;
}

/* s = x + res and LayerNorm of s (unrounded: the float32 sum, as the widened path has it),
 * s and y rounded once each; mean and rstd float32. */
int half_add_layer_norm(const uint16_t *x, const uint16_t *res, const uint16_t *g,
                        const uint16_t *b, uint16_t *s, uint16_t *y, float *mean, float *rstd,
                        int64_t rows, int64_t cols, double eps, int kind, int f16c) {
    float *gb = (float *)rift_alloc(sizeof(float) * (size_t)(2 * cols + 1));
    if (!gb) return -1;
    rift_widen_rows(g, b, gb, cols, kind, f16c);
    int status = 0;
    RIFT_HALF_ROWS(rows, cols, 2 * cols, {
        rift_widen_rows(x + r * cols, res + r * cols, w, cols, kind, f16c);
        add_row_f32(w, w + cols, w, cols);
        rift_from_f32_chunk(w, s + r * cols, cols, kind, f16c);
        ln_row_f32(w, gb, gb + cols, w + cols, mean + r, rstd + r, cols, (float)eps);
        rift_from_f32_chunk(w + cols, y + r * cols, cols, kind, f16c);
    });
    free(gb);
    return status;
}

/* Cross-entropy on 2-byte logits [n x V]: loss rows and lse in float32 (HALF_SPEC), from
 * the float32 kernel's row worker on the widened row. */
int half_cross_entropy(const uint16_t *logits, const int64_t *t, float *loss, float *lse,
                       int64_t n, int64_t V, int kind, int f16c) {
    int status = 0;
    RIFT_HALF_ROWS(n, V, V, {
        rift_to_f32_chunk(logits + r * V, w, V, kind, f16c);
        float l = lse_row_f32(w, V);
        lse[r] = l;
        loss[r] = t[r] < 0 ? 0.0f : l - w[t[r]];
    });
    return status;
}

/* dlogits (2-byte) = dloss[i] (float32, element stride ds) * (exp(logits - lse) - onehot),
 * rounded once; ignored rows (t < 0) are +0. */
int half_cross_entropy_backward(const float *dloss, int64_t ds, const uint16_t *logits,
                                const int64_t *t, const float *lse, uint16_t *dl, int64_t n,
                                int64_t V, int kind, int f16c) {
    int status = 0;
    RIFT_HALF_ROWS(n, V, V, {
        if (t[r] < 0) {
            memset(dl + r * V, 0, sizeof(uint16_t) * (size_t)V);
        } else {
            float s = dloss[r * ds];
            rift_to_f32_chunk(logits + r * V, w, V, kind, f16c);
            ce_bwd_row_f32(w, w, V, lse[r], s);
            w[t[r]] -= s;
            rift_from_f32_chunk(w, dl + r * V, V, kind, f16c);
        }
    });
    return status;
}

/* LayerNorm's backward (with ds: add_layer_norm's, dsum = ds + dx) on 2-byte dy, x, ds,
 * gamma and float32 mean, rstd: the float32 kernel's blocks of RIFT_LN_ROWS rows, each
 * widened into the thread's scratch and run through the same worker (ln_bwd_rows), its dx
 * rounded once; the blocks' float32 partial dgamma, dbeta summed by the same colsum and
 * rounded once. Returns 0, or -1 when scratch memory could not be allocated. */
int half_ln_backward(const uint16_t *dy, const uint16_t *x, const uint16_t *g,
                     const float *mean, const float *rstd, const uint16_t *ds, uint16_t *dx,
                     uint16_t *dg, uint16_t *db, int64_t rows, int64_t cols, int kind,
                     int f16c) {
    int64_t blocks = (rows + RIFT_LN_ROWS - 1) / RIFT_LN_ROWS;
    if (blocks == 0) blocks = 1;
    float *part = (float *)rift_alloc(sizeof(float) * (size_t)((2 * blocks + 3) * cols + 1));
    if (!part) return -1;
    float *gf = part + 2 * blocks * cols, *dgf = gf + cols, *dbf = dgf + cols;
    rift_to_f32_chunk(g, gf, cols, kind, f16c);
    if (rows == 0) memset(part, 0, sizeof(float) * (size_t)(2 * cols));
    int status = 0;
    int64_t span = RIFT_LN_ROWS * cols;
    RIFT_PRAGMA(omp parallel if (rows * cols > RIFT_PAR_ROWS))
    {
        float *w = (float *)rift_alloc(sizeof(float) * (size_t)(3 * span + 1));
        if (!w) {
            RIFT_PRAGMA(omp atomic write)
            status = -1;
        }
        RIFT_PRAGMA(omp for schedule(static))
        for (int64_t k = 0; k < blocks; k++) {
            if (!w) continue;
            int64_t lo = k * RIFT_LN_ROWS, hi = lo + RIFT_LN_ROWS < rows ? lo + RIFT_LN_ROWS : rows;
            int64_t len = (hi - lo) * cols;
            float *wdy = w, *wx = w + span, *wdx = w + 2 * span;
            rift_to_f32_chunk(dy + lo * cols, wdy, len, kind, f16c);
            rift_to_f32_chunk(x + lo * cols, wx, len, kind, f16c);
            ln_bwd_rows_f32(wdy, wx, gf, mean + lo, rstd + lo, wdx, part + 2 * k * cols,
                            part + (2 * k + 1) * cols, 0, hi - lo, cols);
            if (ds) {
                rift_to_f32_chunk(ds + lo * cols, wdy, len, kind, f16c);
                add_row_f32(wdy, wdx, wdx, len);
            }
            rift_from_f32_chunk(wdx, dx + lo * cols, len, kind, f16c);
        }
        free(w);
    }
    if (status == 0) {
        status |= colsum_f32(part, blocks, cols, 2 * cols, dgf);
        status |= colsum_f32(part + cols, blocks, cols, 2 * cols, dbf);
        rift_from_f32_chunk(dgf, dg, cols, kind, f16c);
        rift_from_f32_chunk(dbf, db, cols, kind, f16c);
    }
    free(part);
    return status;
}
