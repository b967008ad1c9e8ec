/* RMSNorm over the last axis: forward (y, rstd) and backward (dx per row; dgamma reduced
 * across rows without atomics, in two deterministic stages, as LayerNorm's dgamma).
 *
 * Integer params P: [0] rows, [1] C (the normalised width); the row kernels add [2] team
 * width (see rows.h), the dgamma kernels [2] rows_per_chunk, [3] chunks.
 * Float params F: [0] eps. No comparison with inf or NaN anywhere: a NaN entry makes its
 * row's sum of squares NaN, and IEEE arithmetic (or Metal's fast math, which still
 * propagates it through + and *) carries it to rstd and the row.
 */

#include "rows.h"

KERNEL void rms_norm_forward(GLOBAL T* y ARG(0), GLOBAL T* rstd ARG(1), GLOBAL const T* x ARG(2),
                             GLOBAL const T* gamma ARG(3), GLOBAL const int* P ARG(4),
                             GLOBAL const T* F ARG(5) THREAD_ARGS) {
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
                T v = x[base + j];
                acc += v * v;
            }
        }
        T ms = rt_team_sum(buf, acc, rt) / (T)C;
        T r = (T)1.0 / PRECISE_SQRT(ms + eps);
        if (active) {
            for (int j = rt.tl; j < C; j += rt.tw) {
                y[base + j] = x[base + j] * r * gamma[j];
            }
            if (rt.tl == 0) {
                rstd[row] = r;
            }
        }
    }
}

/* dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * gamma, xhat = x * rstd. */
KERNEL void rms_norm_backward_dx(GLOBAL T* dx ARG(0), GLOBAL const T* dy ARG(1),
                                 GLOBAL const T* x ARG(2), GLOBAL const T* gamma ARG(3),
                                 GLOBAL const T* rstd ARG(4),
                                 GLOBAL const int* P ARG(5) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int C = P[1];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, rows);
        long base = (long)row * C;
        T r = active ? rstd[row] : (T)0.0;
        T acc = (T)0.0;
        if (active) {
            for (int j = rt.tl; j < C; j += rt.tw) {
                acc += dy[base + j] * gamma[j] * (x[base + j] * r);
            }
        }
        T m = rt_team_sum(buf, acc, rt) / (T)C;
        if (active) {
            for (int j = rt.tl; j < C; j += rt.tw) {
                T xhat = x[base + j] * r;
                dx[base + j] = r * (dy[base + j] * gamma[j] - xhat * m);
            }
        }
    }
}

/* Stage 1: partial[chunk, c] = sum over the chunk's rows of dy * xhat. One thread per
 * (chunk, column), rows in order: deterministic. */
KERNEL void rms_norm_backward_partial(GLOBAL T* partial ARG(0), GLOBAL const T* dy ARG(1),
                                      GLOBAL const T* x ARG(2), GLOBAL const T* rstd ARG(3),
                                      GLOBAL const int* P ARG(4) THREAD_ARGS) {
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
        T acc = (T)0.0;
        for (int r = r0; r < r1; r++) {
            long e = (long)r * C + c;
            acc += dy[e] * x[e] * rstd[r];
        }
        partial[(long)chunk * C + c] = acc;
    }
}

/* Stage 2: dgamma[c] = the sum of the chunk partials, chunks in order, in blocks
 * (BlockSum: a million rows make 15,625 chunks). */
KERNEL void rms_norm_backward_params(GLOBAL T* dgamma ARG(0), GLOBAL const T* partial ARG(1),
                                     GLOBAL const int* P ARG(2) THREAD_ARGS) {
    int C = P[1];
    int chunks = P[3];
    for (int c = GID; c < C; c += GLOBAL_SIZE) {
        BlockSum acc = bsum_init((T)0.0);
        for (int k = 0; k < chunks; k++) {
            acc = bsum_add(acc, partial[(long)k * C + c]);
        }
        dgamma[c] = bsum_total(acc);
    }
}
