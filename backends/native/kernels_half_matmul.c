/* Matmul and the linear-layer family on float16/bfloat16 storage (included once by
 * kernels.c, after kernels_half_ops.c): operands widened once into float32, the float32
 * BLAS parts and kernels, results rounded once (half_matmul.py calls these).
 */

/* Rows of C per float32 tile a thread computes and rounds while it is in cache. */
#define RIFT_HALF_TILE_ROWS 128

/* The stored rows x cols of a 2-byte matrix (row stride ld) widened into a dense float32
 * one (row stride cols). */
static void rift_widen_matrix(const uint16_t *x, int64_t rows, int64_t cols, int64_t ld,
                              float *out, int kind, int f16c) {
    RIFT_PRAGMA(omp parallel for schedule(static) if (rows * cols > RIFT_PAR_MEM))
    for (int64_t r = 0; r < rows; r++)
        rift_to_f32_chunk(x + r * ld, out + r * cols, cols, kind, f16c);
}

/* C[M x N] (dense, 2-byte) = op(A) op(B) (+ bias[N]), computed in float32: A and B are
 * widened once into the caller's float32 buffers a (M*K) and b (K*N), their stored layout
 * kept, so transposed views need no copy (the caller's: recycled buffers, where malloc
 * would page-fault 16 MB back in on every call); each thread multiplies its part of C tile
 * by tile into float32 scratch (blas_matmul's parts, the BLAS single-threaded per thread),
 * adds the float32 bias and rounds the tile once into C. With Y (linear_gelu), GELU of the
 * float32 tile (approx: the tanh form) is rounded once into Y as well. Returns 0, or -1
 * when scratch memory could not be allocated. */
int half_matmul(void *fn, int ta, int tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                int64_t lda, const uint16_t *B, int64_t ldb, uint16_t *C, const uint16_t *bias,
                float *a, float *b, uint16_t *Y, int approx, int kind, int f16c) {
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    float *bf = (float *)rift_alloc(sizeof(float) * (size_t)(N + 1));
    int status = bf ? 0 : -1;
    if (status == 0) {
        rift_widen_matrix(A, ar, ac, lda, a, kind, f16c);
        rift_widen_matrix(B, br, bc, ldb, b, kind, f16c);
        if (bias) rift_to_f32_chunk(bias, bf, N, kind, f16c);
        cblas_gemm_t_f32 gemm = (cblas_gemm_t_f32)fn;
        int by_cols;
        int64_t parts = gemm_parts_f32(M, N, K, &by_cols);
        RIFT_PRAGMA(omp parallel for schedule(static) if (parts > 1))
        for (int64_t c = 0; c < parts; c++) {
            int64_t span = by_cols ? N : M;
            int64_t lo = span * c / parts, hi = span * (c + 1) / parts;
            int64_t m0 = by_cols ? 0 : lo, m1 = by_cols ? M : hi;
            int64_t n0 = by_cols ? lo : 0, nb = by_cols ? hi - lo : N;
            size_t tile_bytes = sizeof(float) * (size_t)(RIFT_HALF_TILE_ROWS * nb);
            float *tile = nb > 0 ? (float *)rift_alloc(tile_bytes) : NULL;
            if (!tile) {
                if (nb > 0) {
                    RIFT_PRAGMA(omp atomic write)
                    status = -1;
                }
                continue;
            }
            for (int64_t i0 = m0; i0 < m1; i0 += RIFT_HALF_TILE_ROWS) {
                int64_t mb = m1 - i0 < RIFT_HALF_TILE_ROWS ? m1 - i0 : RIFT_HALF_TILE_ROWS;
                gemm_part_f32(gemm, 0, 1, 0, ta, tb, mb, nb, K, ta ? a + i0 : a + i0 * ac, ac,
                              tb ? b + n0 * bc : b + n0, bc, tile, nb, bias ? bf + n0 : NULL);
                for (int64_t i = 0; i < mb; i++) {
                    float *h = tile + i * nb;
                    rift_from_f32_chunk(h, C + (i0 + i) * N + n0, nb, kind, f16c);
                    if (Y) {
                        gelu_chunk_f32(h, h, nb, approx);
                        rift_from_f32_chunk(h, Y + (i0 + i) * N + n0, nb, kind, f16c);
                    }
                }
            }
            free(tile);
        }
    }
    free(bf);
    return status;
}

/* linear_backward (gelu < 0) or linear_gelu_backward (gelu: its form, h the pre-activation)
 * on 2-byte dY [M x N], X [M x K], W [K x N] (row strides ldy, ldx, ldw): the operands
 * widened into the caller's float32 scratch `f` (dense), the float32 kernel run on them
 * (its parts, its column sums: the widened path's bits), dX, dW, db rounded once. `f` holds
 * M*K + K*N + M*N + M*K + K*N + N (+ M*N + M*N with GELU) floats. Returns the kernel's
 * status (-1: its scratch could not be allocated). */
/* Rows of H widened at a time by the GELU backward (64 x N floats of scratch). */
#define HALF_GELU_ROWS 64

int half_linear_backward(void *fn, int64_t M, int64_t N, int64_t K, const uint16_t *X,
                         int64_t ldx, const uint16_t *W, int64_t ldw, const uint16_t *dY,
                         int64_t ldy, const uint16_t *H, int64_t ldh, uint16_t *dX,
                         uint16_t *dW, uint16_t *db, float *f, int gelu, int kind, int f16c) {
    float *x = f, *w = x + M * K, *dy = w + K * N, *dx = dy + M * N, *dw = dx + M * K;
    float *dbf = dw + K * N, *h = dbf + N;
    rift_widen_matrix(X, M, K, ldx, x, kind, f16c);
    rift_widen_matrix(W, K, N, ldw, w, kind, f16c);
    rift_widen_matrix(dY, M, N, ldy, dy, kind, f16c);
    if (gelu >= 0) {
        /* dH = dY * gelu'(H) in place over the float32 dY, H widened HALF_GELU_ROWS rows at
         * a time: the float32 kernel's H and dH would take 2 M N floats of scratch, the
         * largest part of a mixed-precision step's high-water mark. Same chunk function on
         * the same values: the bits of linear_gelu_backward_f32's pass. */
        for (int64_t r0 = 0; r0 < M; r0 += HALF_GELU_ROWS) {
            int64_t rows = M - r0 < HALF_GELU_ROWS ? M - r0 : HALF_GELU_ROWS;
            rift_widen_matrix(H + r0 * ldh, rows, N, ldh, h, kind, f16c);
            RIFT_PRAGMA(omp parallel for schedule(static) if (rows * N > RIFT_PAR_MIN))
            for (int64_t i = 0; i < rows; i++)
                gelu_bwd_chunk_f32(dy + (r0 + i) * N, h + i * N, dy + (r0 + i) * N, N, gelu);
        }
    }
    int status = linear_backward_f32(fn, M, N, K, x, K, w, N, dy, N, dx, dw, dbf);
    if (status == 0) {
        half_from_f32(dx, dX, M * K, kind, f16c);
        half_from_f32(dw, dW, K * N, kind, f16c);
        half_from_f32(dbf, db, N, kind, f16c);
    }
    return status;
}
