/* Attention kernels for one dtype; included by kernels.c with T and F(name) defined.
 *
 * q, k, v, dout and out arrive as views [B, H, T, D] with a contiguous last axis and any
 * strides (elements) for b, h, t, passed as st[0..2] per tensor: the model's permuted
 * heads reach the kernel without a copy. Results are dense. Work is split over B*H (one
 * (b, h) per task); each task owns its slices of dq, dk and dv, so nothing races and the
 * summation order never depends on the thread count.
 *
 * Outputs (out, dq, dk, dv) are written through (b, h, t) strides too (`ost`, contiguous
 * last axis): dense [B, H, T, D], or straight into the [B*T, H*D] rows a projection reads
 * (no head merge), or into the q, k, v thirds of one [B*T, 3*H*D] gradient (no concat).
 *
 * Every product goes through one small register-blocked GEMM (4 rows x 64 bytes of
 * columns held in registers across the K loop). Causal work is cut at the diagonal in
 * stripes of 4 query rows (materialised) or tiles of RIFT_QB rows x RIFT_FLASH_BLOCK
 * keys (flash, whose scratch is one such tile: never a T x T buffer).
 */

#define RIFT_AT(p, st, b, h) ((p) + (b) * (st)[0] + (h) * (st)[1])
#define RIFT_MR 4
#define RIFT_NR ((int)(64 / sizeof(T)))
#define RIFT_QB 16

/* Rows [0, M) x columns [j0, N) of the GEMM below, in axpy form (vectorised over n). */
RIFT_CLONES static void F(gemm_edge)(int64_t M, int64_t j0, int64_t N, int64_t K, const T *A,
                                     int64_t ai, int64_t ak, const T *B, int64_t ldb, T *C,
                                     int64_t ldc, int accumulate) {
    for (int64_t r = 0; r < M; r++) {
        T *o = C + r * ldc;
        if (!accumulate)
            for (int64_t j = j0; j < N; j++) o[j] = 0;
        for (int64_t k = 0; k < K; k++) {
            T x = A[r * ai + k * ak];
            const T *b = B + k * ldb;
            RIFT_SIMD
            for (int64_t j = j0; j < N; j++) o[j] += x * b[j];
        }
    }
}

/* C[M x N] (=, or += when accumulate) A[M x K] B[K x N] with A(i, k) = A[i*ai + k*ak]
 * (so a transposed A costs nothing), B(k, n) = B[k*ldb + n], C(i, n) = C[i*ldc + n]. */
RIFT_CLONES static void F(gemm)(int64_t M, int64_t N, int64_t K, const T *A, int64_t ai,
                                int64_t ak, const T *B, int64_t ldb, T *C, int64_t ldc,
                                int accumulate) {
#ifdef RIFT_TILE_F32
    const int tile = sizeof(T) == 4 && rift_tile_ok(); /* kernels_tile.c: same bits */
#endif
    int64_t i = 0;
    for (; i + RIFT_MR <= M; i += RIFT_MR) {
        const T *a0 = A + i * ai, *a1 = a0 + ai, *a2 = a1 + ai, *a3 = a2 + ai;
        int64_t j = 0;
#ifdef RIFT_TILE_F32
        if (tile)
            for (; j + RIFT_NR <= N; j += RIFT_NR)
                rift_tile4x16_f32(K, (const float *)a0, ai, ak, (const float *)(B + j), ldb,
                                  (float *)(C + i * ldc + j), ldc, accumulate);
#endif
        for (; j + RIFT_NR <= N; j += RIFT_NR) {
            T c0[RIFT_NR], c1[RIFT_NR], c2[RIFT_NR], c3[RIFT_NR];
            for (int jj = 0; jj < RIFT_NR; jj++) c0[jj] = c1[jj] = c2[jj] = c3[jj] = 0;
            RIFT_PRAGMA(GCC unroll 1) /* unrolling K spills the accumulators */
            for (int64_t k = 0; k < K; k++) {
                const T *b = B + k * ldb + j;
                T x0 = a0[k * ak], x1 = a1[k * ak], x2 = a2[k * ak], x3 = a3[k * ak];
                for (int jj = 0; jj < RIFT_NR; jj++) {
                    c0[jj] += x0 * b[jj];
                    c1[jj] += x1 * b[jj];
                    c2[jj] += x2 * b[jj];
                    c3[jj] += x3 * b[jj];
                }
            }
            T *o = C + i * ldc + j;
            if (accumulate) {
                for (int jj = 0; jj < RIFT_NR; jj++) {
                    o[jj] += c0[jj];
                    o[ldc + jj] += c1[jj];
                    o[2 * ldc + jj] += c2[jj];
                    o[3 * ldc + jj] += c3[jj];
                }
            } else {
                for (int jj = 0; jj < RIFT_NR; jj++) {
                    o[jj] = c0[jj];
                    o[ldc + jj] = c1[jj];
                    o[2 * ldc + jj] = c2[jj];
                    o[3 * ldc + jj] = c3[jj];
                }
            }
        }
        if (j < N) F(gemm_edge)(RIFT_MR, j, N, K, a0, ai, ak, B, ldb, C + i * ldc, ldc, accumulate);
    }
    if (i < M)
        F(gemm_edge)(M - i, 0, N, K, A + i * ai, ai, ak, B, ldb, C + i * ldc, ldc, accumulate);
}

/* out[j * D + d] = x[j * xt + d]: one head's rows of a strided [T, D] view made dense, so
 * a product that walks them row by row (the B side of the register tile) reads one
 * contiguous block instead of n rows a whole qkv row apart (3 KB at width 256): the tile
 * stalled on those loads. */
static void F(dense_rows)(const T *x, int64_t xt, T *out, int64_t n, int64_t D) {
    for (int64_t j = 0; j < n; j++) memcpy(out + j * D, x + j * xt, sizeof(T) * (size_t)D);
}

/* out[d * ld + j] = x[j * xt + d] for j < n, d < D. Goes through RIFT_NR x RIFT_NR blocks
 * held in a local tile, so the strided side of the copy stays within a few cache lines
 * (a plain double loop stores with a stride of n elements, which the flash backward's
 * profile showed at 12% of its time for T = 64); with AVX2, and n and D multiples of 8,
 * through 8 x 8 blocks in registers (the tile version was still 9% of the flash
 * backward at T = 64). */
RIFT_CLONES static void F(transpose_ld)(const T *x, int64_t xt, T *out, int64_t ld, int64_t n,
                                        int64_t D) {
#ifdef RIFT_TILE_F32
    if (sizeof(T) == 4 && rift_tile_ok() && n % 8 == 0 && D % 8 == 0) { /* kernels_tile.c */
        for (int64_t j = 0; j < n; j += 8)
            for (int64_t d = 0; d < D; d += 8)
                rift_transpose8_f32((const float *)(x + j * xt + d), xt,
                                    (float *)(out + d * ld + j), ld);
        return;
    }
#endif
    T tile[RIFT_NR][RIFT_NR];
    int64_t j = 0;
    for (; j + RIFT_NR <= n; j += RIFT_NR) {
        int64_t d = 0;
        for (; d + RIFT_NR <= D; d += RIFT_NR) {
            for (int a = 0; a < RIFT_NR; a++)
                for (int c = 0; c < RIFT_NR; c++) tile[c][a] = x[(j + a) * xt + d + c];
            for (int c = 0; c < RIFT_NR; c++)
                for (int a = 0; a < RIFT_NR; a++) out[(d + c) * ld + j + a] = tile[c][a];
        }
        for (; d < D; d++)
            for (int a = 0; a < RIFT_NR; a++) out[d * ld + j + a] = x[(j + a) * xt + d];
    }
    for (; j < n; j++)
        for (int64_t d = 0; d < D; d++) out[d * ld + j] = x[j * xt + d];
}

/* Softmax of scale * s[0..n) in place, zeros in [n, full). */
RIFT_CLONES static void F(scaled_softmax)(T *s, int64_t n, int64_t full, T scale) {
    T m = -INFINITY;
    RIFT_SIMD_MAX(m)
    for (int64_t j = 0; j < n; j++) {
        s[j] *= scale;
        m = s[j] > m ? s[j] : m;
    }
    RIFT_EXP_NORMALIZE(s, s, n, m);
    for (int64_t j = n; j < full; j++) s[j] = 0;
}

static int64_t F(min64)(int64_t a, int64_t b) { return a < b ? a : b; }

/* Columns of a causal stripe rounded up to whole register tiles: the few extra masked
 * scores are computed and then zeroed, which is cheaper than the scalar edge path. */
static int64_t F(pad_cols)(int64_t cols, int64_t Tn) {
    int64_t c = (cols + RIFT_NR - 1) / RIFT_NR * RIFT_NR;
    return c < Tn ? c : Tn;
}

int F(attention)(const T *q, const T *k, const T *v, const int64_t *st, T *out,
                 const int64_t *ost, T *probs, int64_t B, int64_t H, int64_t Tn, int64_t D,
                 double scale, int causal) {
    int failed = 0;
    RIFT_PRAGMA(omp parallel if (B * H * Tn * Tn * D > RIFT_PAR_MIN))
    {
        T *kt = (T *)rift_alloc(sizeof(T) * (size_t)(2 * D * Tn));
        if (!kt) failed = 1;
        RIFT_PRAGMA(omp for schedule(static))
        for (int64_t bh = 0; bh < B * H; bh++) {
            if (!kt) continue;
            int64_t b = bh / H, h = bh % H;
            const T *qb = RIFT_AT(q, st, b, h), *kb = RIFT_AT(k, st + 3, b, h);
            T *ob = RIFT_AT(out, ost, b, h), *pb = probs + bh * Tn * Tn, *vb = kt + D * Tn;
            int64_t lo = ost[2];
            F(transpose_ld)(kb, st[5], kt, Tn, Tn, D);
            F(dense_rows)(RIFT_AT(v, st + 6, b, h), st[8], vb, Tn, D);
            for (int64_t i0 = 0; i0 < Tn; i0 += RIFT_MR) {
                int64_t m = F(min64)(RIFT_MR, Tn - i0);
                int64_t cols = causal ? F(pad_cols)(i0 + m, Tn) : Tn;
                T *p = pb + i0 * Tn;
                F(gemm)(m, cols, D, qb + i0 * st[2], st[2], 1, kt, Tn, p, Tn, 0);
                for (int64_t r = 0; r < m; r++)
                    F(scaled_softmax)(p + r * Tn, causal ? i0 + r + 1 : Tn, Tn, (T)scale);
                F(gemm)(m, D, cols, p, Tn, 1, vb, D, ob + i0 * lo, lo, 0);
            }
        }
        free(kt);
    }
    return failed ? -1 : 0;
}

/* True when every probability above the diagonal is exactly 0 (a causal mask): the
 * backward then skips those terms, which are exact zeros for finite inputs. */
static int F(lower_triangular)(const T *p, int64_t Tn) {
    for (int64_t i = 0; i < Tn; i++)
        for (int64_t j = i + 1; j < Tn; j++)
            if (p[i * Tn + j] != 0) return 0;
    return 1;
}

int F(attention_backward)(const T *dout, const T *q, const T *k, const T *v, const int64_t *st,
                          const T *probs, T *dq, T *dk, T *dv, const int64_t *ost, int64_t B,
                          int64_t H, int64_t Tn, int64_t D, double scale) {
    int failed = 0;
    RIFT_PRAGMA(omp parallel if (B * H * Tn * Tn * D > RIFT_PAR_MIN))
    {
        T *vt = (T *)rift_alloc(sizeof(T) * (size_t)(4 * D * Tn + Tn * Tn));
        if (!vt) failed = 1;
        RIFT_PRAGMA(omp for schedule(static))
        for (int64_t bh = 0; bh < B * H; bh++) {
            if (!vt) continue;
            int64_t b = bh / H, h = bh % H;
            const T *vb = RIFT_AT(v, st + 9, b, h);
            /* dO, Q and K are the B side of products below: dense copies (dense_rows) */
            T *dob = vt + D * Tn, *qb = dob + D * Tn, *kb = qb + D * Tn;
            const T *pb = probs + bh * Tn * Tn;
            T *dqb = RIFT_AT(dq, ost, b, h), *dkb = RIFT_AT(dk, ost + 3, b, h);
            T *dvb = RIFT_AT(dv, ost + 6, b, h);
            int64_t lq = ost[2], lk = ost[5], lv = ost[8];
            T *ds = kb + D * Tn;
            int tri = F(lower_triangular)(pb, Tn);
            F(transpose_ld)(vb, st[11], vt, Tn, Tn, D);
            F(dense_rows)(RIFT_AT(dout, st, b, h), st[2], dob, Tn, D);
            F(dense_rows)(RIFT_AT(q, st + 3, b, h), st[5], qb, Tn, D);
            F(dense_rows)(RIFT_AT(k, st + 6, b, h), st[8], kb, Tn, D);
            for (int64_t j0 = 0; j0 < Tn; j0 += RIFT_MR) { /* dV = P^T dO */
                int64_t m = F(min64)(RIFT_MR, Tn - j0), k0 = tri ? j0 : 0;
                F(gemm)(m, D, Tn - k0, pb + k0 * Tn + j0, 1, Tn, dob + k0 * D, D,
                        dvb + j0 * lv, lv, 0);
            }
            for (int64_t i0 = 0; i0 < Tn; i0 += RIFT_MR) { /* dS, then dQ = scale dS K */
                int64_t m = F(min64)(RIFT_MR, Tn - i0), cols = tri ? F(pad_cols)(i0 + m, Tn) : Tn;
                T *dsr = ds + i0 * Tn;
                F(gemm)(m, cols, D, dob + i0 * D, D, 1, vt, Tn, dsr, Tn, 0);
                for (int64_t r = 0; r < m; r++) {
                    const T *p = pb + (i0 + r) * Tn;
                    T *d = dsr + r * Tn, rs = 0;
                    int64_t n = tri ? i0 + r + 1 : Tn;
                    RIFT_SIMD_SUM(rs)
                    for (int64_t j = 0; j < n; j++) rs += p[j] * d[j];
                    RIFT_SIMD
                    for (int64_t j = 0; j < n; j++) d[j] = (T)scale * (p[j] * (d[j] - rs));
                    for (int64_t j = n; j < Tn; j++) d[j] = 0;
                }
                F(gemm)(m, D, cols, dsr, Tn, 1, kb, D, dqb + i0 * lq, lq, 0);
            }
            for (int64_t j0 = 0; j0 < Tn; j0 += RIFT_MR) { /* dK = scale dS^T Q */
                int64_t m = F(min64)(RIFT_MR, Tn - j0), k0 = tri ? j0 : 0;
                F(gemm)(m, D, Tn - k0, ds + k0 * Tn + j0, 1, Tn, qb + k0 * D, D,
                        dkb + j0 * lk, lk, 0);
            }
        }
        free(vt);
    }
    return failed ? -1 : 0;
}

/* -- flash: key blocks with an online softmax; scratch is one RIFT_QB x block tile ---- */
/* The per-tile softmax work is organised so that its cost stays small next to the two
 * GEMMs even for short rows (T = 64 is one key block): profiling the earlier per-row
 * version showed 30% of the forward in it, mostly per-row fixed costs (a serial
 * horizontal sum, a scalar exp for the rescale factor, scalar tails on the diagonal).
 * Here every row is swept in whole RIFT_NR-wide chunks with the mask applied by a select
 * (no scalar tail), the running sum l is kept as RIFT_NR lane partials (reduced once per
 * query tile, not once per block), and the rescale factors of all rows are one vector
 * exp. The order of every sum is fixed by the code, so results do not depend on threads.
 */

static int64_t F(valid_keys)(int causal, int64_t i, int64_t j0, int64_t n) {
    if (!causal) return n;
    int64_t v = i + 1 - j0;
    return v < 0 ? 0 : (v > n ? n : v);
}

/* Columns [0, n) rounded up to whole RIFT_NR chunks; the score tile's row stride is a
 * multiple of RIFT_NR, so the padding stays inside the row (its values are never used). */
static int64_t F(chunks)(int64_t n) { return (n + RIFT_NR - 1) / RIFT_NR * RIFT_NR; }

/* Sum of RIFT_NR lane partials, pairwise in a fixed order. */
static T F(lane_sum)(const T *x) {
    T t[RIFT_NR];
    for (int jj = 0; jj < RIFT_NR; jj++) t[jj] = x[jj];
    for (int w = RIFT_NR / 2; w >= 1; w /= 2)
        for (int jj = 0; jj < w; jj++) t[jj] += t[jj + w];
    return t[0];
}

/* One key block of the online softmax for a tile of mq query rows (first row i0): s holds
 * the raw scores q.k (row stride ls, n columns from key j0). Leaves exp(scale s - m) in s
 * (0 where masked), updates the running max m[r] and the lane partial sums
 * lanes[r * RIFT_NR ..], and rescales the accumulated output rows o (stride lo) by
 * exp(m_old - m_new), unless `first` (o is then overwritten by the caller's GEMM). A row
 * with no valid key so far keeps m = -inf without producing NaN. */
RIFT_CLONES static void F(online_tile)(T *s, int64_t ls, int64_t mq, int64_t n, int64_t i0,
                                       int64_t j0, int causal, T scale, T *m, T *lanes, T *o,
                                       int64_t lo, int64_t D, int first) {
    T mnew[RIFT_QB], corr[RIFT_QB];
    int64_t np = F(chunks)(n);
    for (int64_t r = 0; r < mq; r++) { /* block max of the scaled scores (exact in any order) */
        const T *x = s + r * ls;
        int64_t valid = F(valid_keys)(causal, i0 + r, j0, n);
        T bm = -INFINITY;
        RIFT_SIMD_MAX(bm)
        for (int64_t j = 0; j < np; j++) {
            T y = j < valid ? x[j] * scale : -INFINITY;
            bm = y > bm ? y : bm;
        }
        mnew[r] = bm > m[r] ? bm : m[r];
    }
    RIFT_SIMD
    for (int64_t r = 0; r < mq; r++) { /* all rows' rescale factors: one vector exp */
        T safe = mnew[r] == -INFINITY ? (T)0 : mnew[r];
        corr[r] = m[r] == -INFINITY ? (T)0 : RIFT_EXP(m[r] - safe);
        m[r] = mnew[r];
    }
    for (int64_t r = 0; r < mq; r++) {
        T *x = s + r * ls, *acc = lanes + r * RIFT_NR, c = corr[r];
        T safe = m[r] == -INFINITY ? (T)0 : m[r];
        int64_t valid = F(valid_keys)(causal, i0 + r, j0, n);
        if (first)
            for (int jj = 0; jj < RIFT_NR; jj++) acc[jj] = 0;
        else
            for (int jj = 0; jj < RIFT_NR; jj++) acc[jj] *= c;
        for (int64_t j = 0; j < np; j += RIFT_NR) {
            for (int jj = 0; jj < RIFT_NR; jj++) {
                T e = RIFT_EXP(x[j + jj] * scale - safe);
                e = j + jj < valid ? e : (T)0; /* a select: garbage past n never leaks */
                x[j + jj] = e;
                acc[jj] += e;
            }
        }
        if (!first) {
            T *orow = o + r * lo;
            RIFT_SIMD
            for (int64_t d = 0; d < D; d++) orow[d] *= c;
        }
    }
}

int F(flash_attention)(const T *q, const T *k, const T *v, const int64_t *st, T *out,
                       const int64_t *ost, T *lse, int64_t B, int64_t H, int64_t Tn, int64_t D,
                       double scale, int causal) {
    const int64_t BK = RIFT_FLASH_BLOCK;
    /* K^T's row stride, padded by one chunk: with T a multiple of 1024 an unpadded stride
     * is a multiple of 4 KiB and the D rows a GEMM step reads alias in L1 (T = 1024 ran
     * slower than the materialised kernel for this alone). */
    const int64_t lk = Tn + RIFT_NR;
    int failed = 0;
    RIFT_PRAGMA(omp parallel if (B * H * Tn * Tn * D > RIFT_PAR_MIN))
    {
        T *kt = (T *)rift_alloc(sizeof(T) *
                                (size_t)(D * lk + RIFT_QB * (BK + RIFT_NR + 1) + Tn * D));
        if (!kt) failed = 1;
        else /* the chunk padding of a score row is read (then masked): keep it defined */
            memset(kt + D * lk, 0, sizeof(T) * (size_t)(RIFT_QB * BK));
        RIFT_PRAGMA(omp for schedule(static))
        for (int64_t bh = 0; bh < B * H; bh++) {
            if (!kt) continue;
            int64_t b = bh / H, h = bh % H;
            const T *qb = RIFT_AT(q, st, b, h), *kb = RIFT_AT(k, st + 3, b, h);
            int64_t qt = st[2], lo = ost[2];
            T *ob = RIFT_AT(out, ost, b, h);
            T *s = kt + D * lk, *lanes = s + RIFT_QB * BK, *mx = lanes + RIFT_QB * RIFT_NR;
            T *vb = mx + RIFT_QB; /* V dense (dense_rows): the B side of P V */
            F(transpose_ld)(kb, st[5], kt, lk, Tn, D);
            F(dense_rows)(RIFT_AT(v, st + 6, b, h), st[8], vb, Tn, D);
            for (int64_t i0 = 0; i0 < Tn; i0 += RIFT_QB) {
                int64_t mq = F(min64)(RIFT_QB, Tn - i0), end = causal ? i0 + mq : Tn;
                T *o = ob + i0 * lo;
                for (int64_t r = 0; r < mq; r++) mx[r] = -INFINITY;
                for (int64_t j0 = 0; j0 < end; j0 += BK) {
                    int64_t n = F(min64)(BK, end - j0);
                    F(gemm)(mq, n, D, qb + i0 * qt, qt, 1, kt + j0, lk, s, BK, 0);
                    F(online_tile)(s, BK, mq, n, i0, j0, causal, (T)scale, mx, lanes, o, lo, D,
                                   j0 == 0);
                    F(gemm)(mq, D, n, s, BK, 1, vb + j0 * D, D, o, lo, j0 != 0);
                }
                for (int64_t r = 0; r < mq; r++) {
                    T l = F(lane_sum)(lanes + r * RIFT_NR), inv = (T)1 / l;
                    T *orow = o + r * lo;
                    RIFT_SIMD
                    for (int64_t d = 0; d < D; d++) orow[d] *= inv;
                    lse[bh * Tn + i0 + r] = mx[r] + RIFT_LOG(l);
                }
            }
        }
        free(kt);
    }
    return failed ? -1 : 0;
}

/* dS tile from the rebuilt probabilities: p = exp(scale s - lse) (0 when masked), then
 * ds = scale p (dp - rowsum(dO * O)). Swept in whole chunks with the mask as a select, like
 * online_tile (no scalar tail on the diagonal block). */
RIFT_CLONES static void F(flash_ds_row)(T *p, T *dp, int64_t valid, int64_t n, T scale, T lse,
                                        T di) {
    int64_t np = F(chunks)(n);
    RIFT_SIMD
    for (int64_t j = 0; j < np; j++) {
        T pj = RIFT_EXP(p[j] * scale - lse);
        pj = j < valid ? pj : (T)0;
        p[j] = pj;
        dp[j] = scale * (pj * (dp[j] - di));
    }
}

/* di[r] = dO[r] . O[r] for the mq rows of a query tile (row strides at, ct), in lane
 * partials plus one pairwise reduction (an `omp simd` sum reduced serially per row cost
 * 4% of the backward at T = 128). */
RIFT_CLONES static void F(row_dots)(const T *a, int64_t at, const T *c, int64_t ct, T *di,
                                    int64_t mq, int64_t D) {
    for (int64_t r = 0; r < mq; r++) {
        const T *x = a + r * at, *y = c + r * ct;
        T acc[RIFT_NR];
        for (int jj = 0; jj < RIFT_NR; jj++) acc[jj] = 0;
        int64_t d = 0;
        for (; d + RIFT_NR <= D; d += RIFT_NR)
            for (int jj = 0; jj < RIFT_NR; jj++) acc[jj] += x[d + jj] * y[d + jj];
        T sum = F(lane_sum)(acc);
        for (; d < D; d++) sum += x[d] * y[d];
        di[r] = sum;
    }
}

int F(flash_attention_backward)(const T *dout, const T *q, const T *k, const T *v, const T *out,
                                const int64_t *st, const T *lse, T *dq, T *dk, T *dv,
                                const int64_t *ost, int64_t B, int64_t H, int64_t Tn, int64_t D,
                                double scale, int causal) {
    const int64_t BK = RIFT_FLASH_BLOCK;
    const int64_t lt = Tn + RIFT_NR; /* K^T, V^T row stride: padded as in the forward */
    int failed = 0;
    RIFT_PRAGMA(omp parallel if (B * H * Tn * Tn * D > RIFT_PAR_MIN))
    {
        T *kt = (T *)rift_alloc(sizeof(T) *
                                (size_t)(2 * D * lt + RIFT_QB * (2 * BK + 1) + 3 * Tn * D));
        if (!kt) failed = 1;
        else /* chunk padding of the p and dp rows is read (then masked): keep it defined */
            memset(kt + 2 * D * lt, 0, sizeof(T) * (size_t)(2 * RIFT_QB * BK));
        RIFT_PRAGMA(omp for schedule(static))
        for (int64_t bh = 0; bh < B * H; bh++) {
            if (!kt) continue;
            int64_t b = bh / H, h = bh % H;
            const T *vb = RIFT_AT(v, st + 9, b, h);
            const T *ob = RIFT_AT(out, st + 12, b, h);
            int64_t ot = st[14];
            T *vt = kt + D * lt, *p = vt + D * lt, *dp = p + RIFT_QB * BK, *di = dp + RIFT_QB * BK;
            /* dO, Q and K are the B side of the products below: dense copies (dense_rows) */
            T *dob = di + RIFT_QB, *qb = dob + Tn * D, *kb = qb + Tn * D;
            F(dense_rows)(RIFT_AT(dout, st, b, h), st[2], dob, Tn, D);
            F(dense_rows)(RIFT_AT(q, st + 3, b, h), st[5], qb, Tn, D);
            F(dense_rows)(RIFT_AT(k, st + 6, b, h), st[8], kb, Tn, D);
            T *dqb = RIFT_AT(dq, ost, b, h), *dkb = RIFT_AT(dk, ost + 3, b, h);
            T *dvb = RIFT_AT(dv, ost + 6, b, h);
            int64_t lq = ost[2], lk = ost[5], lv = ost[8];
            F(transpose_ld)(kb, D, kt, lt, Tn, D); /* from the dense copy: K read once */
            F(transpose_ld)(vb, st[11], vt, lt, Tn, D);
            /* dK and dV gather from every query tile: zero them first. dQ needs no zeroing:
             * its first key block (j0 = 0) writes it, later ones accumulate. */
            for (int64_t t = 0; t < Tn; t++) {
                memset(dkb + t * lk, 0, sizeof(T) * (size_t)D);
                memset(dvb + t * lv, 0, sizeof(T) * (size_t)D);
            }
            for (int64_t i0 = 0; i0 < Tn; i0 += RIFT_QB) {
                int64_t mq = F(min64)(RIFT_QB, Tn - i0), end = causal ? i0 + mq : Tn;
                F(row_dots)(dob + i0 * D, D, ob + i0 * ot, ot, di, mq, D); /* rowsum(dO*O) */
                for (int64_t j0 = 0; j0 < end; j0 += BK) {
                    int64_t n = F(min64)(BK, end - j0);
                    F(gemm)(mq, n, D, qb + i0 * D, D, 1, kt + j0, lt, p, BK, 0);
                    F(gemm)(mq, n, D, dob + i0 * D, D, 1, vt + j0, lt, dp, BK, 0);
                    for (int64_t r = 0; r < mq; r++)
                        F(flash_ds_row)(p + r * BK, dp + r * BK,
                                        F(valid_keys)(causal, i0 + r, j0, n), n, (T)scale,
                                        lse[bh * Tn + i0 + r], di[r]);
                    /* dV += P^T dO, dQ += dS K, dK += dS^T Q (scale is inside dS) */
                    F(gemm)(n, D, mq, p, 1, BK, dob + i0 * D, D, dvb + j0 * lv, lv, 1);
                    F(gemm)(mq, D, n, dp, BK, 1, kb + j0 * D, D, dqb + i0 * lq, lq, j0 != 0);
                    F(gemm)(n, D, mq, dp, 1, BK, qb + i0 * D, D, dkb + j0 * lk, lk, 1);
                }
            }
        }
        free(kt);
    }
    return failed ? -1 : 0;
}

#undef RIFT_AT
#undef RIFT_MR
#undef RIFT_NR
#undef RIFT_QB
