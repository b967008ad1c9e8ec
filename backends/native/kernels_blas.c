/* Matrix products through the host BLAS, and the column sums of a linear layer's
 * backward, for one dtype; included by kernels.c with T and F(name) defined.
 *
 * `fn` is a cblas_?gemm with 64-bit integers (numpy's bundled OpenBLAS), which the caller
 * runs single-threaded: each thread of our OpenMP team computes one part of C with one
 * call. Our team sleeps when idle (OMP_WAIT_POLICY=passive) where BLAS threads spin, so
 * on a busy machine a part that loses its core delays only itself.
 *
 * Operands are (M x K) and (K x N) matrices stored row-major with leading dimensions
 * lda, ldb (ta/tb: stored transposed), so a transposed view or a column slice of a
 * wider matrix (the q, k, v thirds of a fused projection) is read in place.
 */

typedef void (*F(cblas_gemm_t))(int, int, int, int64_t, int64_t, int64_t, T, const T *, int64_t,
                                const T *, int64_t, T, T *, int64_t);

/* Below this many multiply-adds a product runs on one thread: waking the team costs
 * 30-60 us on a VM, as long as a 128^3 product takes on one core. */
#define RIFT_GEMM_PAR (1 << 21)
/* Rows per block of the column sums; blocks are combined pairwise (see colsum). */
#define RIFT_SUM_ROWS 32
/* Columns per task of the column sums (a 512-byte stretch of each float row). */
#define RIFT_SUM_COLS 128
/* Waking the team costs about as long as one core copies 1 MB. */
#define RIFT_PAR_MEM (1 << 18)

/* Parts of C computed by separate threads, and whether they are column bands. Row bands
 * make every thread pack all of op(B) (K x N), column bands all of op(A) (M x K): split
 * the dimension whose other operand is smaller, in parts of at least 16 rows or columns. */
static int64_t F(gemm_parts)(int64_t M, int64_t N, int64_t K, int *by_cols) {
    int64_t parts = rift_num_threads();
    *by_cols = N > M;
    int64_t span = *by_cols ? N : M;
    if (M * N * K < RIFT_GEMM_PAR) parts = 1;
    if (parts > span / 16) parts = span / 16 > 0 ? span / 16 : 1;
    return parts;
}

/* Part `c` of `parts`: C[rows or columns lo..hi) = op(A) op(B) (+ bias per column). */
static void F(gemm_part)(F(cblas_gemm_t) gemm, int64_t c, int64_t parts, int by_cols, int ta,
                         int tb, int64_t M, int64_t N, int64_t K, const T *A, int64_t lda,
                         const T *B, int64_t ldb, T *C, int64_t ldc, const T *bias) {
    int64_t span = by_cols ? N : M;
    int64_t lo = span * c / parts, hi = span * (c + 1) / parts;
    int64_t m0 = 0, m1 = M, n0 = 0, n1 = N;
    if (by_cols) { n0 = lo; n1 = hi; } else { m0 = lo; m1 = hi; }
    if (m1 <= m0 || n1 <= n0) return;
    const T *a = ta ? A + m0 : A + m0 * lda; /* op(A) row i is column i of a stored A^T */
    const T *b = tb ? B + n0 * ldb : B + n0;
    T *o = C + m0 * ldc + n0;
    gemm(101, ta ? 112 : 111, tb ? 112 : 111, m1 - m0, n1 - n0, K, (T)1, a, lda, b, ldb, (T)0, o,
         ldc);
    if (bias) { /* the part is still in this core's cache: the epilogue is nearly free */
        for (int64_t i = 0; i < m1 - m0; i++) {
            T *row = o + i * ldc;
            RIFT_SIMD
            for (int64_t j = 0; j < n1 - n0; j++) row[j] += bias[n0 + j];
        }
    }
}

/* C = op(A) op(B), plus bias[N] added to every row when bias is not NULL (the result is
 * bit-identical to the product followed by the add). */
void F(blas_matmul)(void *fn, int ta, int tb, int64_t M, int64_t N, int64_t K, const T *A,
                    int64_t lda, const T *B, int64_t ldb, T *C, int64_t ldc, const T *bias) {
    int by_cols;
    int64_t parts = F(gemm_parts)(M, N, K, &by_cols);
    RIFT_PRAGMA(omp parallel for schedule(static) if (parts > 1))
    for (int64_t c = 0; c < parts; c++)
        F(gemm_part)((F(cblas_gemm_t))fn, c, parts, by_cols, ta, tb, M, N, K, A, lda, B, ldb, C,
                     ldc, bias);
}

/* A stack of products C[i] = op(A + aoff[i]) op(B + boff[i]) with C dense (M x N each):
 * batched and broadcast matmul over strided views. One thread per product when there
 * are several; one product is split like blas_matmul. */
void F(blas_matmul_batched)(void *fn, int ta, int tb, int64_t batch, int64_t M, int64_t N,
                            int64_t K, const T *A, const int64_t *aoff, int64_t lda, const T *B,
                            const int64_t *boff, int64_t ldb, T *C) {
    F(cblas_gemm_t) gemm = (F(cblas_gemm_t))fn;
    if (batch == 1) {
        F(blas_matmul)(fn, ta, tb, M, N, K, A + aoff[0], lda, B + boff[0], ldb, C, N, NULL);
        return;
    }
    RIFT_PRAGMA(omp parallel for schedule(static) if (batch * M * N * K >= RIFT_GEMM_PAR))
    for (int64_t i = 0; i < batch; i++)
        F(gemm_part)(gemm, 0, 1, 0, ta, tb, M, N, K, A + aoff[i], lda, B + boff[i], ldb,
                     C + i * M * N, N, NULL);
}

/* -- column sums ------------------------------------------------------------------- */
/* out[j] = sum over rows of x[r*ld + j] for j in [j0, j1). Blocks of RIFT_SUM_ROWS rows are
 * summed row by row (contiguous, vectorised) in double, then combined pairwise through a
 * binary counter (level l holds the sum of 2^l blocks): the error grows like log(rows),
 * and the order depends on nothing but the shape, so results are the same bits on every
 * run and thread count. Returns -1 when its scratch could not be allocated. */
RIFT_CLONES static int F(colsum_range)(const T *x, int64_t rows, int64_t ld, int64_t j0,
                                       int64_t j1, T *out) {
    int64_t w = j1 - j0, blocks = (rows + RIFT_SUM_ROWS - 1) / RIFT_SUM_ROWS;
    int levels = 1;
    while (((int64_t)1 << levels) <= blocks) levels++;
    double *cur = (double *)rift_alloc(sizeof(double) * (size_t)(w * (levels + 1)) + sizeof(T) * (size_t)w);
    if (!cur) return -1;
    double *level = cur + w; /* level l: level + l * w */
    T *blk = (T *)(level + levels * w);
    uint64_t count = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += RIFT_SUM_ROWS) {
        int64_t r1 = r0 + RIFT_SUM_ROWS < rows ? r0 + RIFT_SUM_ROWS : rows;
        const T *row = x + r0 * ld + j0;
        RIFT_SIMD
        for (int64_t j = 0; j < w; j++) blk[j] = row[j];
        for (int64_t r = r0 + 1; r < r1; r++) {
            row = x + r * ld + j0;
            RIFT_SIMD
            for (int64_t j = 0; j < w; j++) blk[j] += row[j];
        }
        RIFT_SIMD
        for (int64_t j = 0; j < w; j++) cur[j] = (double)blk[j];
        int l = 0;
        for (; count & ((uint64_t)1 << l); l++) {
            const double *lv = level + l * w;
            RIFT_SIMD
            for (int64_t j = 0; j < w; j++) cur[j] += lv[j];
        }
        memcpy(level + l * w, cur, sizeof(double) * (size_t)w);
        count++;
    }
    for (int64_t j = 0; j < w; j++) cur[j] = 0;
    for (int l = 0; l < levels; l++) {
        if (count & ((uint64_t)1 << l)) {
            const double *lv = level + l * w;
            RIFT_SIMD
            for (int64_t j = 0; j < w; j++) cur[j] += lv[j];
        }
    }
    for (int64_t j = 0; j < w; j++) out[j0 + j] = (T)cur[j];
    free(cur);
    return 0;
}

/* out[cols] = column sums of x[rows x cols] (row stride ld): bias gradients and every
 * sum over leading axes. Threads take whole column ranges, so nothing is combined
 * across threads. Returns 0, or -1 when scratch memory could not be allocated. */
int F(colsum)(const T *x, int64_t rows, int64_t cols, int64_t ld, T *out) {
    int64_t tasks = (cols + RIFT_SUM_COLS - 1) / RIFT_SUM_COLS;
    int status = 0;
    RIFT_PRAGMA(omp parallel for schedule(static) reduction(| : status)
                if (rows * cols > RIFT_PAR_MEM && tasks > 1))
    for (int64_t t = 0; t < tasks; t++) {
        int64_t j0 = t * RIFT_SUM_COLS, j1 = j0 + RIFT_SUM_COLS < cols ? j0 + RIFT_SUM_COLS : cols;
        status |= F(colsum_range)(x, rows, ld, j0, j1, out);
    }
    return status;
}

/* db = column sums of dY [M x N] (row stride ldy) in groups of RIFT_SUM_COLS columns, for
 * the threads of an enclosing parallel region (an orphaned worksharing loop, no barrier):
 * linear_backward's bias gradient and the half one's (kernels_half_matmul.c). Returns this
 * thread's status (-1: a column sum could not allocate). */
static int F(colsum_groups)(const T *dY, int64_t M, int64_t N, int64_t ldy, T *db) {
    int status = 0;
    int64_t groups = (N + RIFT_SUM_COLS - 1) / RIFT_SUM_COLS;
    RIFT_PRAGMA(omp for schedule(dynamic, 1) nowait)
    for (int64_t g = 0; g < groups; g++) {
        int64_t j0 = g * RIFT_SUM_COLS, j1 = j0 + RIFT_SUM_COLS < N ? j0 + RIFT_SUM_COLS : N;
        status |= F(colsum_range)(dY, M, ldy, j0, j1, db);
    }
    return status;
}

/* linear_backward's three products, for the threads of an enclosing parallel region (its
 * worksharing loops are orphaned: every thread of the region calls this): dX = dY W^T in px
 * parts, dW = X^T dY in pw parts (gemm_parts), db = column sums of dY in groups of
 * RIFT_SUM_COLS columns. linear_gelu_backward runs them on its dH, so both make the same
 * BLAS calls. Returns this thread's status (-1: a column sum could not allocate). */
static int F(linear_backward_parts)(F(cblas_gemm_t) gemm, int64_t M, int64_t N, int64_t K,
                                    const T *X, int64_t ldx, const T *W, int64_t ldw,
                                    const T *dY, int64_t ldy, T *dX, T *dW, T *db, int64_t px,
                                    int cols_x, int64_t pw, int cols_w) {
    RIFT_PRAGMA(omp for schedule(static) nowait)
    for (int64_t c = 0; c < px; c++) /* dX = dY W^T: (M x N) (N x K), W^T stored as W */
        F(gemm_part)(gemm, c, px, cols_x, 0, 1, M, K, N, dY, ldy, W, ldw, dX, K, NULL);
    RIFT_PRAGMA(omp for schedule(static) nowait)
    for (int64_t c = 0; c < pw; c++) /* dW = X^T dY: (K x M) (M x N), X^T stored as X */
        F(gemm_part)(gemm, c, pw, cols_w, 1, 0, K, N, M, X, ldx, dY, ldy, dW, N, NULL);
    return db ? F(colsum_groups)(dY, M, N, ldy, db) : 0;
}

/* The backward of y = x W + b in one parallel region (one wake-up of the team); returns
 * 0, or -1 when the column sums could not allocate their scratch:
 * dX[M x K] = dY W^T, dW[K x N] = X^T dY, db[N] = column sums of dY. Any of dX, dW, db
 * may be NULL (an input that needs no gradient). W is stored [K x N] (ldw), X [M x K]
 * (ldx), dY [M x N] (ldy); the outputs are dense. */
int F(linear_backward)(void *fn, int64_t M, int64_t N, int64_t K, const T *X, int64_t ldx,
                       const T *W, int64_t ldw, const T *dY, int64_t ldy, T *dX, T *dW, T *db) {
    int cols_x = 0, cols_w = 0;
    int64_t px = dX ? F(gemm_parts)(M, K, N, &cols_x) : 0;
    int64_t pw = dW ? F(gemm_parts)(K, N, M, &cols_w) : 0;
    int parallel = px > 1 || pw > 1, status = 0;
    RIFT_PRAGMA(omp parallel if (parallel) reduction(| : status))
    status |= F(linear_backward_parts)((F(cblas_gemm_t))fn, M, N, K, X, ldx, W, ldw, dY, ldy,
                                       dX, dW, db, px, cols_x, pw, cols_w);
    return status;
}
