/* Flash attention: tiles of K/V (or Q/dO) staged in threadgroup memory, an online softmax
 * in the forward, probabilities rebuilt from the saved log-sum-exp in the backward. No
 * [T, T] buffer exists anywhere; threadgroup memory stays under 26 KiB for both float and
 * double (tiles shrink for double). Head dim D <= FLASH_MAX_HEAD_DIM (the host refuses
 * larger D; it defines FLASH_MAX_HEAD_DIM, FLASH_BLOCK_ROWS and the row layout's indices,
 * core/kernel_host/shader_defines.py).
 *
 * Integer params P: [0] BH (batch * heads), [1] T, [2] D, [3] causal (0/1), then the row
 * layouts of q, k, v and of out (P[4..14], flash_rows.h). lse and drow are dense [BH, T].
 * Float params F: [0] scale.
 * Every kernel walks its blocks grid-stride by threadgroup and splits each phase over the
 * group's threads with flat strided loops, so any group size works; barriers sit outside
 * every divergent branch.
 *
 * Specials without infinities (specials.h): the running max starts at RIFTCO_LOWEST, masking
 * is by index (fa_visible), and each query row ORs the classes of its visible scores, read
 * back from the threadgroup tile (loaded, so fast math cannot fold the test). A row with a
 * NaN or +inf score gives out = lse = NaN; a row with no finite score (every visible score
 * -inf) gives out = NaN, lse = -inf, as the reference's arithmetic does. The backward
 * rebuilds P from the saved lse and decides each row by lse's class (fa_prob).
 */

#include "flash_rows.h"
#include "specials.h"

/* forward: query rows per block (FLASH_BLOCK_ROWS, halved for double) and keys per tile */
#define FA_BQ (sizeof(T) == 8 ? FLASH_BLOCK_ROWS / 2 : FLASH_BLOCK_ROWS)
#define FA_BK (sizeof(T) == 8 ? 8 : 16)
/* backward: rows owned by a block and rows per streamed tile */
#define FB_BR (sizeof(T) == 8 ? FLASH_BLOCK_ROWS / 2 : FLASH_BLOCK_ROWS)
#define FB_BC (sizeof(T) == 8 ? 4 : 8)

/* Stage rows r0 .. r0 + n - 1 of one head's [Tn, D] rows into a threadgroup tile (rows
 * past Tn read as 0); the group's threads split the n * D elements. */
INLINE void fa_stage(LOCAL_PTR T* t, GLOBAL const T* x, FaRows at, int r0, int n, int D, int Tn,
                     int lid, int gsize) {
    for (int e = lid; e < n * D; e += gsize) {
        int r = e / D;
        int i = r0 + r;
        t[e] = i < Tn ? x[at.base + (long)i * at.ld + (e - r * D)] : (T)0.0;
    }
}

/* Swap the group's two streamed tiles for rows r0 .. r0 + n - 1 of x (into tx) and of y
 * (into ty): the first barrier waits until every thread is done with the old tiles, the
 * second until the new ones are whole. Every thread of the group calls it. */
INLINE void fa_restage(LOCAL_PTR T* tx, GLOBAL const T* x, FaRows ax, LOCAL_PTR T* ty,
                       GLOBAL const T* y, FaRows ay, int r0, int n, int D, int Tn, int lid,
                       int gsize) {
    BARRIER();
    fa_stage(tx, x, ax, r0, n, D, Tn, lid, gsize);
    fa_stage(ty, y, ay, r0, n, D, Tn, lid, gsize);
    BARRIER();
}

/* Zero rows r0 .. r0 + n - 1 (those below Tn) of one head's rows. */
INLINE void fa_zero(GLOBAL T* x, FaRows at, int r0, int n, int D, int Tn, int lid, int gsize) {
    for (int e = lid; e < n * D; e += gsize) {
        int r = e / D;
        if (r0 + r < Tn) {
            x[at.base + (long)(r0 + r) * at.ld + (e - r * D)] = (T)0.0;
        }
    }
}

/* Dot product of two D-long rows of threadgroup tiles. */
INLINE T fa_dot(LOCAL_PTR const T* x, LOCAL_PTR const T* y, int D) {
    T acc = (T)0.0;
    for (int d = 0; d < D; d++) {
        acc += x[d] * y[d];
    }
    return acc;
}

/* Whether query i sees key j. */
INLINE int fa_visible(int i, int j, int Tn, int causal) {
    return i < Tn && j < Tn && !(causal && j > i);
}

/* P = exp(s - lse) for a visible score s and its row's saved lse (loaded): a finite lse
 * is the normal case; otherwise what IEEE gives for s - lse: NaN (lse NaN), inf (lse
 * -inf) or 0 (lse +inf). */
INLINE T fa_prob(T s, T lse) {
    if (RIFTCO_ISFINITE(lse)) {
        return rs_exp(s - lse);
    }
    return RIFTCO_ISNAN(lse) ? RIFTCO_NAN : (RIFTCO_ISNEGINF(lse) ? RIFTCO_INF : (T)0.0);
}

/* One visible score of the backward, rebuilt from tiles: P = exp(scale q_i . k_j - lse_i)
 * (fa_prob) and dS = P (dO_i . v_j - drow_i). flash_backward_dkdv and flash_backward_dq
 * both call this, so the two halves of the backward see the same P bit for bit. */
typedef struct {
    T p;
    T ds;
} FaGrad;

INLINE FaGrad fa_no_grad(void) {
    FaGrad g;
    g.p = (T)0.0;
    g.ds = (T)0.0;
    return g;
}

INLINE FaGrad fa_grad(LOCAL_PTR const T* qi, LOCAL_PTR const T* kj, LOCAL_PTR const T* doi,
                      LOCAL_PTR const T* vj, int D, T scale, T lse, T drow) {
    FaGrad g;
    g.p = fa_prob(fa_dot(qi, kj, D) * scale, lse);
    g.ds = g.p * (fa_dot(doi, vj, D) - drow);
    return g;
}

/* g = (P, dS) of entry e of a backward kernel's score tile, query-major with nk keys a
 * row: query i = i0 + r against key j = j0 + c (e = r * nk + c), their rows in the tiles
 * qs, dos and ks, vs; zero where i does not see j. Both backward kernels cut their tiles
 * so, with the query and key sides swapped between the block and the stream. A macro, as
 * the kernels wrote it (it declares r, c, i, j and g and reads D, Tn, causal, scale, lse,
 * drow and b), so their arithmetic stays that of the written-out loop. */
#define FA_GRAD_CELL(g, e, nk, i0, j0, qs, ks, dos, vs)                                   \
    int r = (e) / (nk);                                                                    \
    int c = (e) - r * (nk);                                                                \
    int i = (i0) + r;                                                                      \
    int j = (j0) + c;                                                                      \
    FaGrad g = fa_no_grad();                                                               \
    if (fa_visible(i, j, Tn, causal)) {                                                    \
        g = fa_grad((qs) + r * D, (ks) + c * D, (dos) + r * D, (vs) + c * D, D, scale,    \
                    lse[b.rbase + i], drow[b.rbase + i]);                                  \
    }

KERNEL void flash_forward(GLOBAL T* out ARG(0), GLOBAL T* lse ARG(1), GLOBAL const T* q ARG(2),
                          GLOBAL const T* k ARG(3), GLOBAL const T* v ARG(4),
                          GLOBAL const int* P ARG(5), GLOBAL const T* F ARG(6) THREAD_ARGS) {
    LOCAL T kt[FA_BK * FLASH_MAX_HEAD_DIM];
    LOCAL T vt[FA_BK * FLASH_MAX_HEAD_DIM];
    LOCAL T acc[FA_BQ * FLASH_MAX_HEAD_DIM];
    LOCAL T sc[FA_BQ * FA_BK];
    LOCAL T mrow[FA_BQ];
    LOCAL T lrow[FA_BQ];
    LOCAL T corr[FA_BQ];
    LOCAL int crow[FA_BQ];
    FA_SCALARS(P, F, P[2]);
    int BQ = FA_BQ;
    int BK = FA_BK;
    int nqb = (Tn + BQ - 1) / BQ;
    for (int blk = GROUP_ID; blk < BH * nqb; blk += NUM_GROUPS) {
        FaBlock b = fa_block(P, blk, nqb, BQ);
        int q0 = b.r0;
        for (int e = LID; e < BQ * D; e += GROUP_SIZE) {
            acc[e] = (T)0.0;
        }
        for (int r = LID; r < BQ; r += GROUP_SIZE) {
            mrow[r] = RIFTCO_LOWEST;
            lrow[r] = (T)0.0;
            crow[r] = 0;
        }
        int q_end = q0 + BQ < Tn ? q0 + BQ : Tn;
        int k_end = causal ? q_end : Tn;
        for (int k0 = 0; k0 < k_end; k0 += BK) {
            fa_restage(kt, k, b.k, vt, v, b.v, k0, BK, D, Tn, LID, GROUP_SIZE);
            for (int e = LID; e < BQ * BK; e += GROUP_SIZE) {
                int r = e / BK;
                int c = e - r * BK;
                int i = q0 + r;
                int j = k0 + c;
                T s = (T)0.0; /* masked: never read as a score (fa_visible decides) */
                if (fa_visible(i, j, Tn, causal)) {
                    GLOBAL const T* qi = q + b.q.base + (long)i * b.q.ld;
                    T dot = (T)0.0;
                    for (int d = 0; d < D; d++) {
                        dot += qi[d] * kt[c * D + d];
                    }
                    s = dot * scale;
                }
                sc[e] = s;
            }
            BARRIER();
            for (int r = LID; r < BQ; r += GROUP_SIZE) {
                T m_old = mrow[r];
                T m_new = m_old;
                int cls = 0;
                for (int c = 0; c < BK; c++) {
                    T s = sc[r * BK + c];
                    int k = fa_visible(q0 + r, k0 + c, Tn, causal) ? rs_class(s) : 0;
                    cls |= k;
                    m_new = k == RS_FINITE ? fmax(m_new, s) : m_new;
                }
                T lsum = (T)0.0;
                for (int c = 0; c < BK; c++) {
                    T s = sc[r * BK + c];
                    int use = fa_visible(q0 + r, k0 + c, Tn, causal) && RIFTCO_ISFINITE(s);
                    T p = use ? rs_exp(s - m_new) : (T)0.0;
                    sc[r * BK + c] = p;
                    lsum += p;
                }
                /* an empty row so far (l = 0) has nothing to rescale */
                T cr = lrow[r] > (T)0.0 ? rs_exp(m_old - m_new) : (T)0.0;
                corr[r] = cr;
                lrow[r] = lrow[r] * cr + lsum;
                mrow[r] = m_new;
                crow[r] |= cls;
            }
            BARRIER();
            for (int e = LID; e < BQ * D; e += GROUP_SIZE) {
                int r = e / D;
                int d = e - r * D;
                T a = acc[e] * corr[r];
                for (int c = 0; c < BK; c++) {
                    a += sc[r * BK + c] * vt[c * D + d];
                }
                acc[e] = a;
            }
        }
        BARRIER();
        for (int e = LID; e < BQ * D; e += GROUP_SIZE) {
            int r = e / D;
            int d = e - r * D;
            int i = q0 + r;
            if (i < Tn) {
                out[b.o.base + (long)i * b.o.ld + d] =
                    crow[r] == RS_FINITE ? acc[e] / lrow[r] : RIFTCO_NAN;
            }
        }
        for (int r = LID; r < BQ; r += GROUP_SIZE) {
            int i = q0 + r;
            if (i < Tn) {
                int cls = crow[r];
                lse[b.rbase + i] = cls == RS_FINITE ? mrow[r] + PRECISE_LOG(lrow[r])
                                   : (cls & RS_POISON ? RIFTCO_NAN : RIFTCO_NEGINF);
            }
        }
        BARRIER();
    }
}

/* drow[row] = sum_d dout[row, d] * out[row, d]; one thread per row (row = bh * T + i). */
KERNEL void flash_backward_rowdot(GLOBAL T* drow ARG(0), GLOBAL const T* dout ARG(1),
                                  GLOBAL const T* out ARG(2), GLOBAL const int* P ARG(3)
                                  THREAD_ARGS) {
    int Tn = P[1];
    int rows = P[0] * Tn;
    int D = P[2];
    for (int row = GID; row < rows; row += GLOBAL_SIZE) {
        int bh = row / Tn;
        FaRows o = fa_out_rows(P, bh);
        long at = o.base + (long)(row - bh * Tn) * o.ld;
        T acc = (T)0.0;
        for (int d = 0; d < D; d++) {
            acc += dout[at + d] * out[at + d];
        }
        drow[row] = acc;
    }
}

/* dk, dv for a block of FB_BR keys, streaming query tiles of FB_BC rows. Each (key, d)
 * element of dk/dv belongs to one block, so it accumulates in place without atomics. */
KERNEL void flash_backward_dkdv(GLOBAL T* dk ARG(0), GLOBAL T* dv ARG(1), GLOBAL const T* q ARG(2),
                                GLOBAL const T* k ARG(3), GLOBAL const T* v ARG(4),
                                GLOBAL const T* dout ARG(5), GLOBAL const T* lse ARG(6),
                                GLOBAL const T* drow ARG(7), GLOBAL const int* P ARG(8),
                                GLOBAL const T* F ARG(9) THREAD_ARGS) {
    LOCAL T kb[FB_BR * FLASH_MAX_HEAD_DIM];
    LOCAL T vb[FB_BR * FLASH_MAX_HEAD_DIM];
    LOCAL T qt[FB_BC * FLASH_MAX_HEAD_DIM];
    LOCAL T dot_t[FB_BC * FLASH_MAX_HEAD_DIM];
    LOCAL T pt[FB_BC * FB_BR];
    LOCAL T dst[FB_BC * FB_BR];
    FA_SCALARS(P, F, P[2]);
    int BR = FB_BR;
    int BC = FB_BC;
    int nkb = (Tn + BR - 1) / BR;
    for (int blk = GROUP_ID; blk < BH * nkb; blk += NUM_GROUPS) {
        FaBlock b = fa_block(P, blk, nkb, BR);
        int k0 = b.r0;
        fa_stage(kb, k, b.k, k0, BR, D, Tn, LID, GROUP_SIZE);
        fa_stage(vb, v, b.v, k0, BR, D, Tn, LID, GROUP_SIZE);
        fa_zero(dk, b.k, k0, BR, D, Tn, LID, GROUP_SIZE);
        fa_zero(dv, b.v, k0, BR, D, Tn, LID, GROUP_SIZE);
        int i_start = causal ? (k0 / BC) * BC : 0;
        for (int i0 = i_start; i0 < Tn; i0 += BC) {
            fa_restage(qt, q, b.q, dot_t, dout, b.o, i0, BC, D, Tn, LID, GROUP_SIZE);
            for (int e = LID; e < BC * BR; e += GROUP_SIZE) {
                FA_GRAD_CELL(g, e, BR, i0, k0, qt, kb, dot_t, vb);
                pt[e] = g.p;
                dst[e] = g.ds;
            }
            BARRIER();
            for (int e = LID; e < BR * D; e += GROUP_SIZE) {
                int c = e / D;
                int d = e - c * D;
                int j = k0 + c;
                if (j < Tn) {
                    T sdv = (T)0.0;
                    T sdk = (T)0.0;
                    for (int r = 0; r < BC; r++) {
                        sdv += pt[r * BR + c] * dot_t[r * D + d];
                        sdk += dst[r * BR + c] * qt[r * D + d];
                    }
                    dv[b.v.base + (long)j * b.v.ld + d] += sdv;
                    dk[b.k.base + (long)j * b.k.ld + d] += scale * sdk;
                }
            }
        }
        BARRIER();
    }
}

/* dq for a block of FB_BR query rows, streaming key tiles of FB_BC rows. */
KERNEL void flash_backward_dq(GLOBAL T* dq ARG(0), GLOBAL const T* q ARG(1),
                              GLOBAL const T* k ARG(2), GLOBAL const T* v ARG(3),
                              GLOBAL const T* dout ARG(4), GLOBAL const T* lse ARG(5),
                              GLOBAL const T* drow ARG(6), GLOBAL const int* P ARG(7),
                              GLOBAL const T* F ARG(8) THREAD_ARGS) {
    LOCAL T qb[FB_BR * FLASH_MAX_HEAD_DIM];
    LOCAL T dob[FB_BR * FLASH_MAX_HEAD_DIM];
    LOCAL T kt[FB_BC * FLASH_MAX_HEAD_DIM];
    LOCAL T vt[FB_BC * FLASH_MAX_HEAD_DIM];
    LOCAL T dst[FB_BR * FB_BC];
    FA_SCALARS(P, F, P[2]);
    int BR = FB_BR;
    int BC = FB_BC;
    int nqb = (Tn + BR - 1) / BR;
    for (int blk = GROUP_ID; blk < BH * nqb; blk += NUM_GROUPS) {
        FaBlock b = fa_block(P, blk, nqb, BR);
        int q0 = b.r0;
        fa_stage(qb, q, b.q, q0, BR, D, Tn, LID, GROUP_SIZE);
        fa_stage(dob, dout, b.o, q0, BR, D, Tn, LID, GROUP_SIZE);
        fa_zero(dq, b.q, q0, BR, D, Tn, LID, GROUP_SIZE);
        int q_end = q0 + BR < Tn ? q0 + BR : Tn;
        int k_end = causal ? q_end : Tn;
        for (int k0 = 0; k0 < k_end; k0 += BC) {
            fa_restage(kt, k, b.k, vt, v, b.v, k0, BC, D, Tn, LID, GROUP_SIZE);
            for (int e = LID; e < BR * BC; e += GROUP_SIZE) {
                FA_GRAD_CELL(g, e, BC, q0, k0, qb, kt, dob, vt);
                dst[e] = g.ds;
            }
            BARRIER();
            for (int e = LID; e < BR * D; e += GROUP_SIZE) {
                int r = e / D;
                int d = e - r * D;
                int i = q0 + r;
                if (i < Tn) {
                    T acc = (T)0.0;
                    for (int c = 0; c < BC; c++) {
                        acc += dst[r * BC + c] * kt[c * D + d];
                    }
                    dq[b.q.base + (long)i * b.q.ld + d] += scale * acc;
                }
            }
        }
        BARRIER();
    }
}
