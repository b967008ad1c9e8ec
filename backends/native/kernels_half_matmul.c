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

/* Rows of H widened at a time by the GELU backward (64 x N floats of scratch). */
#define HALF_GELU_ROWS 64
/* Columns of X the linear backward holds in float32 at a time, at least: see below. */
#define HALF_BWD_MIN_COLS 256

/* The columns of X per chunk of the linear backward: X is held in float32 no wider than
 * dY (M x N, widened whole anyway) or HALF_BWD_MIN_COLS columns, whichever is wider. */
static int64_t half_bwd_cols(int64_t N, int64_t K) {
    int64_t kc = N > HALF_BWD_MIN_COLS ? N : HALF_BWD_MIN_COLS;
    return kc < K ? kc : K;
}

int64_t half_linear_backward_floats(int64_t M, int64_t N, int64_t K, int gelu) {
    int64_t h = gelu >= 0 ? (M < HALF_GELU_ROWS ? M : HALF_GELU_ROWS) * N : 0;
    return M * half_bwd_cols(N, K) + 2 * K * N + M * N + N + h;
}

/* linear_backward (gelu < 0) or linear_gelu_backward (gelu: its form, h the pre-activation)
 * on 2-byte dY [M x N], X [M x K], W [K x N] (row strides ldy, ldx, ldw); dX, dW, db dense.
 *
 * W and dY are widened whole (dY becomes dH in place), X a chunk of kc columns at a time
 * (half_bwd_cols), and no float32 dX is ever held: per chunk, dW's rows = X's columns^T dH
 * are computed, then, once no thread reads the chunk any more, dX's columns = dH W's
 * rows^T are written over it and rounded. X and dX are the largest matrices of an MLP's
 * down projection, and a float32 copy of each was most of a mixed-precision step's
 * activation high-water mark. The chunks are not narrower because, on the 2-vCPU machines
 * this was measured on, two threads calling OpenBLAS at once lose a fixed ~0.2 ms per
 * pair of calls: each product is split over the threads (gemm_parts), one call each.
 * With one chunk (K <= max(N, 256)) these are the float32 kernel's calls, so its bits;
 * with more, each element is still one call's sum over the same inner dimension, but BLAS
 * may block it differently, so the float32 sums can differ in their last bits.
 * Scratch `f` (the caller's, so it counts as allocated): half_linear_backward_floats.
 * Returns 0, or -1 when the column sums of dH (db) could not allocate their scratch. */
int half_linear_backward(void *fn, int64_t M, int64_t N, int64_t K, const uint16_t *X,
                         int64_t ldx, const uint16_t *W, int64_t ldw, const uint16_t *dY,
                         int64_t ldy, const uint16_t *H, int64_t ldh, uint16_t *dX,
                         uint16_t *dW, uint16_t *db, float *f, int gelu, int kind, int f16c) {
    int64_t kc = half_bwd_cols(N, K);
    float *x = f, *w = x + M * kc, *dy = w + K * N, *dw = dy + M * N, *dbf = dw + K * N;
    float *h = dbf + N;
    rift_widen_matrix(W, K, N, ldw, w, kind, f16c);
    rift_widen_matrix(dY, M, N, ldy, dy, kind, f16c);
    if (gelu >= 0) {
        /* dH = dY * gelu'(H) in place over the float32 dY, H widened HALF_GELU_ROWS rows at
         * a time; the same chunk function on the same values as linear_gelu_backward_f32. */
        for (int64_t r0 = 0; r0 < M; r0 += HALF_GELU_ROWS) {
            int64_t rows = M - r0 < HALF_GELU_ROWS ? M - r0 : HALF_GELU_ROWS;
            rift_widen_matrix(H + r0 * ldh, rows, N, ldh, h, kind, f16c);
            RIFT_PRAGMA(omp parallel for schedule(static) if (rows * N > RIFT_PAR_MIN))
            for (int64_t i = 0; i < rows; i++)
                gelu_bwd_chunk_f32(dy + (r0 + i) * N, h + i * N, dy + (r0 + i) * N, N, gelu);
        }
    }
    cblas_gemm_t_f32 gemm = (cblas_gemm_t_f32)fn;
    int cols_x, cols_w, status = 0;
    int64_t px = gemm_parts_f32(M, kc, N, &cols_x), pw = gemm_parts_f32(kc, N, M, &cols_w);
    RIFT_PRAGMA(omp parallel if (px > 1 || pw > 1) reduction(| : status))
    {
        status |= colsum_groups_f32(dy, M, N, N, dbf); /* db: the float32 kernel's sums */
        for (int64_t k0 = 0; k0 < K; k0 += kc) { /* every thread walks the chunks in order */
            int64_t kb = K - k0 < kc ? K - k0 : kc;
            RIFT_PRAGMA(omp for schedule(static))
            for (int64_t r = 0; r < M; r++)
                rift_to_f32_chunk(X + r * ldx + k0, x + r * kb, kb, kind, f16c);
            RIFT_PRAGMA(omp for schedule(static))
            for (int64_t c = 0; c < pw; c++) /* dW rows k0.. = X chunk^T dH */
                gemm_part_f32(gemm, c, pw, cols_w, 1, 0, kb, N, M, x, kb, dy, N, dw + k0 * N,
                              N, NULL);
            /* that loop's barrier: every dW part has read the chunk; dX may overwrite it */
            RIFT_PRAGMA(omp for schedule(static))
            for (int64_t c = 0; c < px; c++) /* dX columns k0.. = dH (W rows k0..)^T */
                gemm_part_f32(gemm, c, px, cols_x, 0, 1, M, kb, N, dy, N, w + k0 * N, N, x, kb,
                              NULL);
            RIFT_PRAGMA(omp for schedule(static)) /* its barrier: the next chunk's widening */
            for (int64_t r = 0; r < M; r++)
                rift_from_f32_chunk(x + r * kb, dX + r * K + k0, kb, kind, f16c);
        }
    }
    if (status == 0) {
        half_from_f32(dw, dW, K * N, kind, f16c);
        half_from_f32(dbf, db, N, kind, f16c);
    }
    return status;
}
