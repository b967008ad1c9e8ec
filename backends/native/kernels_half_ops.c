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

/* y in the 2-byte dtype; mean and rstd stay float32 (HALF_SPEC: statistics of a
 * low-precision LayerNorm are float32 outputs, the backward reads them as they are). */
int half_layer_norm(const uint16_t *x, const uint16_t *g, const uint16_t *b, uint16_t *y,
                    float *mean, float *rstd, int64_t rows, int64_t cols, double eps, int kind,
                    int f16c) {
    float *gb = (float *)rift_alloc(sizeof(float) * (size_t)(2 * cols + 1));
    if (!gb) return -1;
    rift_to_f32_chunk(g, gb, cols, kind, f16c);
    rift_to_f32_chunk(b, gb + cols, cols, kind, f16c);
    int status = 0;
    RIFT_HALF_ROWS(rows, cols, cols, {
        rift_to_f32_chunk(x + r * cols, w, cols, kind, f16c);
        ln_row_f32(w, gb, gb + cols, w, mean + r, rstd + r, cols, (float)eps);
        rift_from_f32_chunk(w, y + r * cols, cols, kind, f16c);
    });
    free(gb);
    return status;
}
