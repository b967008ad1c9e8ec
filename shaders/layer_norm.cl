/* LayerNorm over the last axis: forward (y, mean, rstd) and backward (dx per row; dgamma
 * and dbeta reduced across rows without atomics, in two deterministic stages).
 *
 * Also the residual add fused with it (op unit add_layer_norm): add_layer_norm_forward
 * and add_layer_norm_backward_dx (its dgamma/dbeta are the stages below, on s).
 *
 * Integer params P: [0] rows, [1] C (the normalised width); the row kernels add [2] team
 * width (see rows.h), the params kernels [2] rows_per_chunk, [3] chunks.
 * Float params F: [0] eps. Variance is computed from centred values (two passes), so
 * large offsets do not cancel.
 *
 * Tensors are TS, computed in T (half.h): for float16 / bfloat16 the entries load to
 * float and each result is rounded once when stored; the statistics (mean, rstd) and the
 * partial sums of dgamma/dbeta stay T (float32), as the op units say. add_layer_norm's
 * half forward normalises the float32 sum x + res, not the rounded s it stores.
 */

#include "rows.h"
#include "half.h"

/* An entry of the row being normalised, as a T: x's (LayerNorm), the residual sum's
 * (add_layer_norm: read back from s in float programs, where it is exact; recomputed from
 * x and res in half programs, where s holds it rounded). */
#define LN_X(i) LOAD(x, i)
#if defined(RIFTCO_STORAGE_F16) || defined(RIFTCO_STORAGE_BF16)
#define LN_SUM(i) (LOAD(x, i) + LOAD(res, i))
#else
#define LN_SUM(i) (s[i])
#endif
#define LN_S(i) LOAD(s, i)

/* Each LayerNorm row kernel and its add_layer_norm twin share their row arithmetic through
 * these macros rather than helper functions: expanded in place, both compile to the
 * operations they had when written out, fast math included (a helper function once changed
 * the bits there). They read the names the row kernels declare alike: buf, rt, row,
 * active, base, C, and the kernel's buffers (y, gamma, beta, mean, rstd, eps; dy).
 *
 * Forward, once each lane holds its part of the row's sum in acc: the mean, the variance
 * of the centred entries SRC(i) (a second pass), rstd, then y and the saved mean, rstd. */
#define LN_NORMALIZE_ROW(SRC, acc)                                              \
    T mu = rt_team_sum(buf, acc, rt) / (T)C;                                    \
    acc = (T)0.0;                                                               \
    if (active) {                                                               \
        for (int j = rt.tl; j < C; j += rt.tw) {                                \
            T d = SRC(base + j) - mu;                                           \
            acc += d * d;                                                       \
        }                                                                       \
    }                                                                           \
    T var = rt_team_sum(buf, acc, rt) / (T)C;                                   \
    T r = (T)1.0 / PRECISE_SQRT(var + eps);                                     \
    if (active) {                                                               \
        for (int j = rt.tl; j < C; j += rt.tw) {                                \
            STORE(y, base + j,                                                  \
                  (SRC(base + j) - mu) * r * LOAD(gamma, j) + LOAD(beta, j));   \
        }                                                                       \
        if (rt.tl == 0) {                                                       \
            mean[row] = mu;                                                     \
            rstd[row] = r;                                                      \
        }                                                                       \
    }

/* The backward kernels' row means (same names, with dy): mu and r loaded, then
 * mean_g = mean(g) and mean_gx = mean(g * xhat) with g = dy * gamma, xhat of SRC. */
#define LN_BACKWARD_ROW_MEANS(SRC)                                              \
    T mu = active ? mean[row] : (T)0.0;                                         \
    T r = active ? rstd[row] : (T)0.0;                                          \
    T acc_g = (T)0.0;                                                           \
    T acc_gx = (T)0.0;                                                          \
    if (active) {                                                               \
        for (int j = rt.tl; j < C; j += rt.tw) {                                \
            T g = LOAD(dy, base + j) * LOAD(gamma, j);                          \
            acc_g += g;                                                         \
            acc_gx += g * (SRC(base + j) - mu) * r;                             \
        }                                                                       \
    }                                                                           \
    T mean_g = rt_team_sum(buf, acc_g, rt) / (T)C;                              \
    T mean_gx = rt_team_sum(buf, acc_gx, rt) / (T)C

/* dx of column j from its xhat; the caller keeps it a statement of its own (a wider
 * expression could be contracted differently). */
#define LN_DX(xhat) r * (LOAD(dy, base + j) * LOAD(gamma, j) - mean_g - (xhat) * mean_gx)

KERNEL void layer_norm_forward(GLOBAL TS* y ARG(0), GLOBAL T* mean ARG(1), GLOBAL T* rstd ARG(2),
                               GLOBAL const TS* x ARG(3), GLOBAL const TS* gamma ARG(4),
                               GLOBAL const TS* beta ARG(5), GLOBAL const int* P ARG(6),
                               GLOBAL const T* F ARG(7) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int C = P[1];
    T eps = F[0];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, rows);
        long base = (long)row * C;
        T acc = (T)0.0;
        if (active) {
            for (int j = rt.tl; j < C; j += rt.tw) {
                acc += LN_X(base + j);
            }
        }
        LN_NORMALIZE_ROW(LN_X, acc);
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma. */
KERNEL void layer_norm_backward_dx(GLOBAL TS* dx ARG(0), GLOBAL const TS* dy ARG(1),
                                   GLOBAL const TS* x ARG(2), GLOBAL const TS* gamma ARG(3),
                                   GLOBAL const T* mean ARG(4), GLOBAL const T* rstd ARG(5),
                                   GLOBAL const int* P ARG(6) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int C = P[1];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, rows);
        long base = (long)row * C;
        LN_BACKWARD_ROW_MEANS(LN_X);
        if (active) {
            for (int j = rt.tl; j < C; j += rt.tw) {
                T xhat = (LN_X(base + j) - mu) * r;
                STORE(dx, base + j, LN_DX(xhat));
            }
        }
    }
}

/* add_layer_norm (residual add + LayerNorm): s = x + res written, then normalised as
 * layer_norm_forward does. Each team thread reads back only the elements it wrote. */
KERNEL void add_layer_norm_forward(GLOBAL TS* s ARG(0), GLOBAL TS* y ARG(1), GLOBAL T* mean ARG(2),
                                   GLOBAL T* rstd ARG(3), GLOBAL const TS* x ARG(4),
                                   GLOBAL const TS* res ARG(5), GLOBAL const TS* gamma ARG(6),
                                   GLOBAL const TS* beta ARG(7), GLOBAL const int* P ARG(8),
                                   GLOBAL const T* F ARG(9) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int C = P[1];
    T eps = F[0];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, rows);
        long base = (long)row * C;
        T acc = (T)0.0;
        if (active) {
            for (int j = rt.tl; j < C; j += rt.tw) {
                T v = LOAD(x, base + j) + LOAD(res, base + j);
                STORE(s, base + j, v);
                acc += v;
            }
        }
        LN_NORMALIZE_ROW(LN_SUM, acc);
    }
}

/* dsum = ds + dx, dx as layer_norm_backward_dx computes it (the stream's gradient folded
 * into the LayerNorm's backward: no separate add launch). */
KERNEL void add_layer_norm_backward_dx(GLOBAL TS* dsum ARG(0), GLOBAL const TS* dy ARG(1),
                                       GLOBAL const TS* ds ARG(2), GLOBAL const TS* s ARG(3),
                                       GLOBAL const TS* gamma ARG(4), GLOBAL const T* mean ARG(5),
                                       GLOBAL const T* rstd ARG(6),
                                       GLOBAL const int* P ARG(7) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int C = P[1];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, rows);
        long base = (long)row * C;
        LN_BACKWARD_ROW_MEANS(LN_S);
        if (active) {
            for (int j = rt.tl; j < C; j += rt.tw) {
                T xhat = (LN_S(base + j) - mu) * r;
                T dx = LN_DX(xhat);
                STORE(dsum, base + j, LOAD(ds, base + j) + dx);
            }
        }
    }
}

/* Stage 1: partial[chunk, 0, c] = sum over the chunk's rows of dy * xhat, partial[chunk, 1,
 * c] = sum of dy. One thread per (chunk, column), rows in order: deterministic. */
KERNEL void layer_norm_backward_partial(GLOBAL T* partial ARG(0), GLOBAL const TS* dy ARG(1),
                                        GLOBAL const TS* x ARG(2), GLOBAL const T* mean ARG(3),
                                        GLOBAL const T* rstd ARG(4),
                                        GLOBAL const int* P ARG(5) THREAD_ARGS) {
    int rows = P[0];
    int C = P[1];
    int per_chunk = P[2];
    int chunks = P[3];
    long total = (long)chunks * C;
    for (long t = GID; t < total; t += GLOBAL_SIZE) {
        int chunk = (int)(t / C);
        int c = (int)(t - (long)chunk * C);
        int r0 = chunk * per_chunk;
        int r1 = r0 + per_chunk < rows ? r0 + per_chunk : rows;
        T acc_gamma = (T)0.0;
        T acc_beta = (T)0.0;
        for (int r = r0; r < r1; r++) {
            long e = (long)r * C + c;
            T d = LOAD(dy, e);
            acc_gamma += d * (LN_X(e) - mean[r]) * rstd[r];
            acc_beta += d;
        }
        partial[((long)chunk * 2) * C + c] = acc_gamma;
        partial[((long)chunk * 2 + 1) * C + c] = acc_beta;
    }
}

/* Stage 2: dgamma[c], dbeta[c] = sums of the chunk partials, chunks in order, in blocks
 * (BlockSum: a million rows make 15,625 chunks). */
KERNEL void layer_norm_backward_params(GLOBAL TS* dgamma ARG(0), GLOBAL TS* dbeta ARG(1),
                                       GLOBAL const T* partial ARG(2),
                                       GLOBAL const int* P ARG(3) THREAD_ARGS) {
    int C = P[1];
    int chunks = P[3];
    for (int c = GID; c < C; c += GLOBAL_SIZE) {
        BlockSum acc_gamma = bsum_init((T)0.0);
        BlockSum acc_beta = bsum_init((T)0.0);
        for (int k = 0; k < chunks; k++) {
            acc_gamma = bsum_add(acc_gamma, partial[((long)k * 2) * C + c]);
            acc_beta = bsum_add(acc_beta, partial[((long)k * 2 + 1) * C + c]);
        }
        STORE(dgamma, c, bsum_total(acc_gamma));
        STORE(dbeta, c, bsum_total(acc_beta));
    }
}
