/* A linear layer with GELU fused in, for one dtype (op unit riftco.ops.fused.linear_gelu);
 * included by kernels.c with T and F(name) defined, after the GELU workers and
 * kernels_blas.c.
 *
 * Same bits as the unfused layer, by construction: the product is split into exactly the
 * parts blas_matmul makes (gemm_parts, gemm_part), so every element of H is the same BLAS
 * dot product; the bias is added with the same single rounding; and GELU and its
 * derivative run the same cloned workers (gelu_chunk, gelu_bwd_chunk) as the standalone
 * ops. Those are elementwise, and an element's value does not depend on where a chunk
 * starts: the float exp is a branch-free polynomial (the vector body and the scalar tail
 * run the same operations), the double one is libm's scalar exp, and the workers are
 * called through their ifunc, so the same clone as gelu/gelu_backward is picked.
 */

/* Forward: H = op(A) op(B) + bias, Y = gelu(H). Each thread adds the bias and applies GELU
 * to its own part of the product row by row while the part is still in its cache, and the
 * standalone GELU pass (reading H back from memory, one more wake-up of the team) is gone. */
void F(linear_gelu)(void *fn, int ta, int tb, int64_t M, int64_t N, int64_t K, const T *A,
                    int64_t lda, const T *B, int64_t ldb, const T *bias, T *H, T *Y, int approx) {
    int by_cols;
    int64_t parts = F(gemm_parts)(M, N, K, &by_cols);
    RIFT_PRAGMA(omp parallel for schedule(static) if (parts > 1))
    for (int64_t c = 0; c < parts; c++) {
        F(gemm_part)((F(cblas_gemm_t))fn, c, parts, by_cols, ta, tb, M, N, K, A, lda, B, ldb,
                     H, N, NULL);
        int64_t span = by_cols ? N : M;
        int64_t lo = span * c / parts, hi = span * (c + 1) / parts;
        int64_t m0 = by_cols ? 0 : lo, m1 = by_cols ? M : hi;
        int64_t n0 = by_cols ? lo : 0, n1 = by_cols ? hi : N;
        for (int64_t i = m0; i < m1; i++) {
            T *h = H + i * N + n0;
            RIFT_SIMD
            for (int64_t j = 0; j < n1 - n0; j++) h[j] += bias[n0 + j];
            F(gelu_chunk)(h, Y + i * N + n0, n1 - n0, approx);
        }
    }
}

/* Backward: dH = dY * gelu'(H) into the caller's scratch dH [M x N] (dense), then
 * linear_backward's three products on dH, all in one parallel region (one wake-up of the
 * team instead of two): the threads split the rows of the elementwise pass, meet at its
 * barrier, then share the products and column sums (linear_backward_parts). Returns 0,
 * or -1 when the column sums could not allocate their scratch. */
int F(linear_gelu_backward)(void *fn, int64_t M, int64_t N, int64_t K, const T *X, int64_t ldx,
                            const T *W, int64_t ldw, const T *dY, int64_t ldy, const T *H,
                            int64_t ldh, T *dH, T *dX, T *dW, T *db, int approx) {
    F(cblas_gemm_t) gemm = (F(cblas_gemm_t))fn;
    int cols_x, cols_w;
    int64_t px = F(gemm_parts)(M, K, N, &cols_x);
    int64_t pw = F(gemm_parts)(K, N, M, &cols_w);
    int parallel = px > 1 || pw > 1 || M * N > RIFT_PAR_MIN, status = 0;
    RIFT_PRAGMA(omp parallel if (parallel) reduction(| : status))
    {
        RIFT_PRAGMA(omp for schedule(static))
        for (int64_t i = 0; i < M; i++) /* implicit barrier: the products read all of dH */
            F(gelu_bwd_chunk)(dY + i * ldy, H + i * ldh, dH + i * N, N, approx);
        status |= F(linear_backward_parts)(gemm, M, N, K, X, ldx, W, ldw, dH, N, dX, dW, db, px,
                                           cols_x, pw, cols_w);
    }
    return status;
}
