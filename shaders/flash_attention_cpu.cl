/* Flash attention for CPU-class OpenCL devices (PoCL): no threadgroup memory, no barrier.
 * PoCL turns a barrier into per-region work-item loops that spill every value live across
 * it, so these kernels give each thread FC_R rows (query rows for the forward and dq, key
 * rows for dk/dv) and keep their running state in private arrays, streaming the other
 * operand's rows straight from global memory (they stay in cache: one head's K and V are
 * T * D elements each); each streamed row feeds FC_R dot products. GPUs and Metal keep the
 * tiled kernels of flash_attention.cl; the host picks these when the runtime reports is_cpu
 * (threads = BH * ceil(T / FC_R); FC_R is the host's FLASH_CPU_ROWS, defined with the
 * other flash constants in core/kernel_host/shader_defines.py).
 *
 * Same parameters as flash_attention.cl: P = [BH, T, D, causal, then the row layouts of
 * q, k, v (and their gradients) and of out, dout], F = [scale]; D <= FLASH_MAX_HEAD_DIM (the host
 * refuses larger D). Every kernel is grid-stride over rows, so any group size
 * and any thread count work.
 *
 * Dot products over D run in FC_VW independent lanes (part[c][u]) so that the fixed-trip,
 * unrolled u loops vectorise without reassociating a reduction (no fast math); a D that is
 * not a multiple of FC_VW finishes with a scalar tail. Rows are taken FC_BK at a time; a
 * row past the visible range is clamped to a valid address, its exp argument clamped to
 * RIFTCO_EXP_FLOOR and its result replaced by 0 with a select (no branch around the exp,
 * so PoCL vectorises it; no -inf anywhere, so fast math cannot break it).
 * Specials follow flash_attention.cl: the running max starts at RIFTCO_LOWEST, each row ORs
 * its visible scores' classes (a NaN or +inf score: out = lse = NaN; none finite: out =
 * NaN, lse = -inf), and the backward decides each row by its saved lse's class.
 * Sums run in a fixed order and each output element has one writer: deterministic.
 */

#include "flash_rows.h"
#include "specials.h"

/* A row's saved lse as both backward kernels use it: finite (then P = exp(s - lse)), or
 * special, when every visible score of the row gets the P that IEEE arithmetic gives for
 * s - lse: NaN (lse NaN), inf (lse -inf) or 0 (lse +inf), decided on the loaded lse. A
 * special lse reads as 0 so that the clamped exps computed before the select stay finite. */
typedef struct {
    T lse;
    int finite;
    T special;
} FcLse;

INLINE FcLse fc_lse(T lse) {
    FcLse e;
    e.finite = RIFTCO_ISFINITE(lse);
    e.special = RIFTCO_ISNAN(lse) ? RIFTCO_NAN : (RIFTCO_ISNEGINF(lse) ? RIFTCO_INF : (T)0.0);
    e.lse = e.finite ? lse : (T)0.0;
    return e;
}

#define FC_R FLASH_CPU_ROWS
#define FC_BK 8
#define FC_VW 4

/* Declares idx[FC_BK], the rows of a streamed tile: j0 + c, clamped to end - 1 past the end
 * (those are read, so they must exist, and then masked). */
#define FC_TILE_ROWS(idx, j0, end) \
    int idx[FC_BK];                \
    UNROLL for (int c_ = 0; c_ < FC_BK; c_++) idx[c_] = (j0) + c_ < (end) ? (j0) + c_ : (end) - 1

/* x[c] = exp(x[c]) for the FC_BK entries of a private row: OpenCL vector exps, since
 * PoCL leaves the scalar calls of flash_backward_dkdv_rows unvectorised (the other kernels
 * measured no faster with it), element-wise under Metal and CUDA. The vectors are 128 bits
 * (float4, double2), the width every x86-64 and ARM64 CPU passes in registers: a wider
 * one makes clang warn that the builtin's ABI depends on AVX / AVX-512 being enabled
 * (-Wpsabi, "AVX vector return of type 'double8' without 'avx512f'"), which PoCL on an
 * AVX2-only CPU prints for double8 and on an SSE-only one would print for float8. */
#if defined(__OPENCL_VERSION__) && FC_BK % 4 == 0
INLINE void fc_exp_row_float(__private float* x) {
    UNROLL for (int v = 0; v < FC_BK / 4; v++) vstore4(exp(vload4(v, x)), v, x);
}
#if defined(RIFTCO_FP64)
INLINE void fc_exp_row_double(__private double* x) {
    UNROLL for (int v = 0; v < FC_BK / 2; v++) vstore2(exp(vload2(v, x)), v, x);
}
#endif
#define FC_EXP_ROW(x) RIFTCO_CAT(fc_exp_row_, T)(x)
#else
#define FC_EXP_ROW(x)                                                                \
    {                                                                                \
        UNROLL for (int c_ = 0; c_ < FC_BK; c_++) (x)[c_] = PRECISE_EXP((x)[c_]);    \
    }
#endif

/* s[r][c] = x[r] . rows[idx[c]] for FC_R rows x (at xs + xi[r] * xld) and FC_BK rows
 * (at rows + idx[c] * rld). */
#define FC_DOTS_R(s, xs, xld, xi, rows, rld, idx, D)                                 \
    {                                                                                \
        T part[FC_R][FC_BK][FC_VW];                                                  \
        UNROLL for (int r = 0; r < FC_R; r++) {                                      \
            UNROLL for (int c = 0; c < FC_BK; c++) {                                 \
                UNROLL for (int u = 0; u < FC_VW; u++) part[r][c][u] = (T)0.0;       \
            }                                                                        \
        }                                                                            \
        int dfull = (D / FC_VW) * FC_VW;                                             \
        for (int d0 = 0; d0 < dfull; d0 += FC_VW) {                                  \
            T xv[FC_R][FC_VW];                                                       \
            UNROLL for (int r = 0; r < FC_R; r++) {                                  \
                UNROLL for (int u = 0; u < FC_VW; u++) xv[r][u] = xs[(long)xi[r] * xld + d0 + u]; \
            }                                                                        \
            UNROLL for (int c = 0; c < FC_BK; c++) {                                 \
                GLOBAL const T* rr = rows + (long)idx[c] * rld + d0;                 \
                T rv[FC_VW];                                                         \
                UNROLL for (int u = 0; u < FC_VW; u++) rv[u] = rr[u];                \
                UNROLL for (int r = 0; r < FC_R; r++) {                              \
                    UNROLL for (int u = 0; u < FC_VW; u++) part[r][c][u] += xv[r][u] * rv[u]; \
                }                                                                    \
            }                                                                        \
        }                                                                            \
        for (int d = dfull; d < D; d++) {                                            \
            UNROLL for (int c = 0; c < FC_BK; c++) {                                 \
                T rd = rows[(long)idx[c] * rld + d];                                 \
                UNROLL for (int r = 0; r < FC_R; r++) part[r][c][0] += xs[(long)xi[r] * xld + d] * rd; \
            }                                                                        \
        }                                                                            \
        UNROLL for (int r = 0; r < FC_R; r++) {                                      \
            UNROLL for (int c = 0; c < FC_BK; c++) {                                 \
                T acc = (T)0.0;                                                      \
                UNROLL for (int u = 0; u < FC_VW; u++) acc += part[r][c][u];         \
                s[r][c] = acc;                                                       \
            }                                                                        \
        }                                                                            \
    }

/* acc[r][d] = acc[r][d] * keep[r] + sum_c w[r][c] * rows[idx[c] * rld + d] for d < D. */
#define FC_AXPY_R(acc, keep, w, rows, rld, idx, D)                                   \
    {                                                                                \
        int dfull = (D / FC_VW) * FC_VW;                                             \
        for (int d0 = 0; d0 < dfull; d0 += FC_VW) {                                  \
            T a[FC_R][FC_VW];                                                        \
            UNROLL for (int r = 0; r < FC_R; r++) {                                  \
                UNROLL for (int u = 0; u < FC_VW; u++) a[r][u] = acc[r][d0 + u] * keep[r]; \
            }                                                                        \
            UNROLL for (int c = 0; c < FC_BK; c++) {                                 \
                GLOBAL const T* rr = rows + (long)idx[c] * rld + d0;                 \
                T rv[FC_VW];                                                         \
                UNROLL for (int u = 0; u < FC_VW; u++) rv[u] = rr[u];                \
                UNROLL for (int r = 0; r < FC_R; r++) {                              \
                    UNROLL for (int u = 0; u < FC_VW; u++) a[r][u] += w[r][c] * rv[u]; \
                }                                                                    \
            }                                                                        \
            UNROLL for (int r = 0; r < FC_R; r++) {                                  \
                UNROLL for (int u = 0; u < FC_VW; u++) acc[r][d0 + u] = a[r][u];     \
            }                                                                        \
        }                                                                            \
        for (int d = dfull; d < D; d++) {                                            \
            UNROLL for (int r = 0; r < FC_R; r++) {                                  \
                T a = acc[r][d] * keep[r];                                           \
                UNROLL for (int c = 0; c < FC_BK; c++) a += w[r][c] * rows[(long)idx[c] * rld + d]; \
                acc[r][d] = a;                                                       \
            }                                                                        \
        }                                                                            \
    }

/* Block b's head as the row kernels stream it: q, k, v from qb, kb, vb (row stride ld)
 * and, in the backward, dout from dob (row stride old). */
#define FC_QKV_ROWS(b)                          \
    int ld = P[FLASH_P_ROW_STRIDE];             \
    GLOBAL const T* qb = q + (b).q.base;        \
    GLOBAL const T* kb = k + (b).k.base;        \
    GLOBAL const T* vb = v + (b).v.base
#define FC_DOUT_ROWS(b)                         \
    int old = P[FLASH_P_OUT_ROW_STRIDE];        \
    GLOBAL const T* dob = dout + (b).o.base

/* FC_R query rows per thread: online softmax over key tiles, output rows in private arrays. */
KERNEL void flash_forward_rows(GLOBAL T* out ARG(0), GLOBAL T* lse ARG(1),
                               GLOBAL const T* q ARG(2), GLOBAL const T* k ARG(3),
                               GLOBAL const T* v ARG(4), GLOBAL const int* P ARG(5),
                               GLOBAL const T* F ARG(6) THREAD_ARGS) {
    FA_SCALARS(P, F, P[2] < FLASH_MAX_HEAD_DIM ? P[2] : FLASH_MAX_HEAD_DIM);
    T acc[FC_R][FLASH_MAX_HEAD_DIM];
    int nb = (Tn + FC_R - 1) / FC_R;
    for (int blk = GID; blk < BH * nb; blk += GLOBAL_SIZE) {
        FaBlock b = fa_block(P, blk, nb, FC_R);
        int i0 = b.r0;
        FC_QKV_ROWS(b);
        int qi[FC_R];
        int kend[FC_R];
        T m[FC_R];
        T l[FC_R];
        int poison[FC_R];
        UNROLL for (int r = 0; r < FC_R; r++) {
            qi[r] = i0 + r < Tn ? i0 + r : Tn - 1;
            kend[r] = causal ? qi[r] + 1 : Tn;
            m[r] = RIFTCO_LOWEST;
            l[r] = (T)0.0;
            poison[r] = 0;
            for (int d = 0; d < D; d++) {
                acc[r][d] = (T)0.0;
            }
        }
        int k_end = kend[FC_R - 1];
        for (int j0 = 0; j0 < k_end; j0 += FC_BK) {
            FC_TILE_ROWS(idx, j0, k_end);
            T s[FC_R][FC_BK];
            FC_DOTS_R(s, qb, ld, qi, kb, ld, idx, D);
            T cr[FC_R];
            UNROLL for (int r = 0; r < FC_R; r++) {
                /* The max over visible scores (fmax skips NaN, -inf never wins over the
                 * sentinel); NaN and +inf set poison. A -inf or NaN score then gets
                 * exp(floor) = 0 from the clamp, so only masking needs a select. */
                T m_new = m[r];
                UNROLL for (int c = 0; c < FC_BK; c++) {
                    T v = s[r][c] * scale;
                    int vis = j0 + c < kend[r];
                    poison[r] |= vis & (RIFTCO_ISNAN(v) | RIFTCO_ISPOSINF(v));
                    m_new = fmax(m_new, vis ? v : RIFTCO_LOWEST);
                    s[r][c] = v;
                }
                T lsum = (T)0.0;
                UNROLL for (int c = 0; c < FC_BK; c++) {
                    T e = rs_exp(s[r][c] - m_new);
                    s[r][c] = j0 + c < kend[r] ? e : (T)0.0;
                    lsum += s[r][c];
                }
                cr[r] = rs_exp(m[r] - m_new); /* l = 0 so far: whatever it is multiplies 0 */
                l[r] = l[r] * cr[r] + lsum;
                m[r] = m_new;
            }
            FC_AXPY_R(acc, cr, s, vb, ld, idx, D);
        }
        UNROLL for (int r = 0; r < FC_R; r++) {
            if (i0 + r < Tn) {
                long row = b.rbase + i0 + r;
                long orow = b.o.base + (long)(i0 + r) * P[FLASH_P_OUT_ROW_STRIDE];
                /* l >= 1 once a finite score was seen (its max contributes exp(0)) */
                int normal = !poison[r] && l[r] > (T)0.0;
                for (int d = 0; d < D; d++) {
                    out[orow + d] = normal ? acc[r][d] / l[r] : RIFTCO_NAN;
                }
                lse[row] = normal ? m[r] + PRECISE_LOG(l[r])
                                  : (poison[r] ? RIFTCO_NAN : RIFTCO_NEGINF);
            }
        }
    }
}

/* dq for FC_R query rows per thread, streaming key rows; drow = rowsum(dO * O). */
KERNEL void flash_backward_dq_rows(GLOBAL T* dq ARG(0), GLOBAL const T* q ARG(1),
                                   GLOBAL const T* k ARG(2), GLOBAL const T* v ARG(3),
                                   GLOBAL const T* dout ARG(4), GLOBAL const T* lse ARG(5),
                                   GLOBAL const T* drow ARG(6), GLOBAL const int* P ARG(7),
                                   GLOBAL const T* F ARG(8) THREAD_ARGS) {
    FA_SCALARS(P, F, P[2] < FLASH_MAX_HEAD_DIM ? P[2] : FLASH_MAX_HEAD_DIM);
    T acc[FC_R][FLASH_MAX_HEAD_DIM];
    int nb = (Tn + FC_R - 1) / FC_R;
    for (int blk = GID; blk < BH * nb; blk += GLOBAL_SIZE) {
        FaBlock b = fa_block(P, blk, nb, FC_R);
        int i0 = b.r0;
        long rbase = b.rbase;
        FC_QKV_ROWS(b);
        FC_DOUT_ROWS(b);
        int qi[FC_R];
        int kend[FC_R];
        T li[FC_R];
        T di[FC_R];
        T one[FC_R];
        int lfin[FC_R];
        T lspec[FC_R];
        UNROLL for (int r = 0; r < FC_R; r++) {
            qi[r] = i0 + r < Tn ? i0 + r : Tn - 1;
            kend[r] = causal ? qi[r] + 1 : Tn;
            FcLse e = fc_lse(lse[rbase + qi[r]]);
            li[r] = e.lse;
            lfin[r] = e.finite;
            lspec[r] = e.special;
            di[r] = drow[rbase + qi[r]];
            one[r] = (T)1.0;
            for (int d = 0; d < D; d++) {
                acc[r][d] = (T)0.0;
            }
        }
        int k_end = kend[FC_R - 1];
        for (int j0 = 0; j0 < k_end; j0 += FC_BK) {
            FC_TILE_ROWS(idx, j0, k_end);
            T s[FC_R][FC_BK];
            T dp[FC_R][FC_BK];
            FC_DOTS_R(s, qb, ld, qi, kb, ld, idx, D);
            FC_DOTS_R(dp, dob, old, qi, vb, ld, idx, D);
            /* clamped exps, then selects (masked: 0; row with a special lse: lspec);
             * separate unrolled passes vectorise */
            UNROLL for (int r = 0; r < FC_R; r++) {
                UNROLL for (int c = 0; c < FC_BK; c++) s[r][c] = rs_exp(s[r][c] * scale - li[r]);
            }
            UNROLL for (int r = 0; r < FC_R; r++) {
                UNROLL for (int c = 0; c < FC_BK; c++) {
                    T p = lfin[r] ? s[r][c] : lspec[r];
                    s[r][c] = j0 + c < kend[r] ? p : (T)0.0;
                }
            }
            UNROLL for (int r = 0; r < FC_R; r++) {
                UNROLL for (int c = 0; c < FC_BK; c++) s[r][c] *= dp[r][c] - di[r];
            }
            FC_AXPY_R(acc, one, s, kb, ld, idx, D);
        }
        UNROLL for (int r = 0; r < FC_R; r++) {
            if (i0 + r < Tn) {
                GLOBAL T* dqr = dq + b.q.base + (long)(i0 + r) * ld;
                for (int d = 0; d < D; d++) {
                    dqr[d] = scale * acc[r][d];
                }
            }
        }
    }
}

/* dk, dv for FC_R key rows per thread, streaming query rows and rebuilding P from lse. */
KERNEL void flash_backward_dkdv_rows(GLOBAL T* dk ARG(0), GLOBAL T* dv ARG(1),
                                     GLOBAL const T* q ARG(2), GLOBAL const T* k ARG(3),
                                     GLOBAL const T* v ARG(4), GLOBAL const T* dout ARG(5),
                                     GLOBAL const T* lse ARG(6), GLOBAL const T* drow ARG(7),
                                     GLOBAL const int* P ARG(8), GLOBAL const T* F ARG(9)
                                     THREAD_ARGS) {
    FA_SCALARS(P, F, P[2] < FLASH_MAX_HEAD_DIM ? P[2] : FLASH_MAX_HEAD_DIM);
    T acck[FC_R][FLASH_MAX_HEAD_DIM];
    T accv[FC_R][FLASH_MAX_HEAD_DIM];
    int nb = (Tn + FC_R - 1) / FC_R;
    for (int blk = GID; blk < BH * nb; blk += GLOBAL_SIZE) {
        FaBlock b = fa_block(P, blk, nb, FC_R);
        int j0 = b.r0;
        long rbase = b.rbase;
        FC_QKV_ROWS(b);
        FC_DOUT_ROWS(b);
        int kj[FC_R];
        T one[FC_R];
        UNROLL for (int r = 0; r < FC_R; r++) {
            kj[r] = j0 + r < Tn ? j0 + r : Tn - 1;
            one[r] = (T)1.0;
            for (int d = 0; d < D; d++) {
                acck[r][d] = (T)0.0;
                accv[r][d] = (T)0.0;
            }
        }
        int i_start = causal ? kj[0] : 0;
        for (int i0 = i_start; i0 < Tn; i0 += FC_BK) {
            FC_TILE_ROWS(idx, i0, Tn);
            T s[FC_R][FC_BK];
            T dp[FC_R][FC_BK];
            FC_DOTS_R(s, kb, ld, kj, qb, ld, idx, D);
            FC_DOTS_R(dp, vb, ld, kj, dob, old, idx, D);
            T lc[FC_BK];
            T dc[FC_BK];
            int lfin[FC_BK];
            T lspec[FC_BK];
            UNROLL for (int c = 0; c < FC_BK; c++) {
                FcLse e = fc_lse(lse[rbase + idx[c]]);
                lc[c] = e.lse;
                lfin[c] = e.finite;
                lspec[c] = e.special;
                dc[c] = drow[rbase + idx[c]];
            }
            /* clamped exps, then selects (masked: 0; a query row with a special lse: its
             * lspec); separate unrolled passes vectorise */
            UNROLL for (int r = 0; r < FC_R; r++) {
                UNROLL for (int c = 0; c < FC_BK; c++) {
                    s[r][c] = fmax(s[r][c] * scale - lc[c], RIFTCO_EXP_FLOOR);
                }
                FC_EXP_ROW(s[r]);
                UNROLL for (int c = 0; c < FC_BK; c++) {
                    int seen = i0 + c < Tn && !(causal && i0 + c < kj[r]);
                    s[r][c] = seen ? (lfin[c] ? s[r][c] : lspec[c]) : (T)0.0;
                }
            }
            UNROLL for (int r = 0; r < FC_R; r++) {
                UNROLL for (int c = 0; c < FC_BK; c++) {
                    dp[r][c] = scale * s[r][c] * (dp[r][c] - dc[c]);
                }
            }
            FC_AXPY_R(accv, one, s, dob, old, idx, D);
            FC_AXPY_R(acck, one, dp, qb, ld, idx, D);
        }
        UNROLL for (int r = 0; r < FC_R; r++) {
            if (j0 + r < Tn) {
                GLOBAL T* dkr = dk + b.k.base + (long)(j0 + r) * ld;
                GLOBAL T* dvr = dv + b.v.base + (long)(j0 + r) * ld;
                for (int d = 0; d < D; d++) {
                    dkr[d] = acck[r][d];
                    dvr[d] = accv[r][d];
                }
            }
        }
    }
}
