/* RMSNorm over the last axis: forward (y, rstd) and backward dx per row. dgamma is
 * LayerNorm's two-stage column sum (layer_norm.cl) with a zero mean: the host launches it.
 *
 * Integer params P: [0] rows, [1] C (the normalised width), [2] team width (see rows.h).
 * Float params F: [0] eps. No comparison with inf or NaN anywhere: a NaN entry makes its
 * row's sum of squares NaN, and IEEE arithmetic (or Metal's fast math, which still
 * propagates it through + and *) carries it to rstd and the row.
 */

#include "rows.h"

/* The row a team serves in one round of the grid-stride loop, and where it starts. */
typedef struct {
    int row;
    int active;
    long base;
} RmsRow;

INLINE RmsRow rms_row(RowTeam rt, int r0, int rows, int C) {
    RmsRow w;
    w.row = r0 + rt.team;
    w.active = rt_active(rt, w.row, rows);
    w.base = (long)w.row * C;
    return w;
}

/* Sum over the team's row (from element base, C long) of x^2; every team thread gets it
 * and every thread of the group must call it (it holds barriers). */
INLINE T rms_sum_squares(LOCAL_PTR T* buf, GLOBAL const T* x, long base, int C, int active,
                         RowTeam rt) {
    T acc = (T)0.0;
    for (int j = active ? rt.tl : C; j < C; j += rt.tw) {
        T v = x[base + j];
        acc += v * v;
    }
    return rt_team_sum(buf, acc, rt);
}

/* Sum over the team's row of g * xhat with g = dy * gamma and xhat = x * r. */
INLINE T rms_sum_g_xhat(LOCAL_PTR T* buf, GLOBAL const T* dy, GLOBAL const T* x,
                        GLOBAL const T* gamma, T r, long base, int C, int active, RowTeam rt) {
    T acc = (T)0.0;
    for (int j = active ? rt.tl : C; j < C; j += rt.tw) {
        acc += dy[base + j] * gamma[j] * (x[base + j] * r);
    }
    return rt_team_sum(buf, acc, rt);
}

/* y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps). */
KERNEL void rms_norm_forward(GLOBAL T* y ARG(0), GLOBAL T* rstd ARG(1), GLOBAL const T* x ARG(2),
                             GLOBAL const T* gamma ARG(3), GLOBAL const int* P ARG(4),
                             GLOBAL const T* F ARG(5) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    int C = P[1];
    for (int r0 = GROUP_ID * rt.teams; r0 < P[0]; r0 += NUM_GROUPS * rt.teams) {
        RmsRow w = rms_row(rt, r0, P[0], C);
        T ms = rms_sum_squares(buf, x, w.base, C, w.active, rt) / (T)C;
        T r = (T)1.0 / PRECISE_SQRT(ms + F[0]);
        for (int j = w.active ? rt.tl : C; j < C; j += rt.tw) {
            y[w.base + j] = x[w.base + j] * r * gamma[j];
        }
        if (w.active && rt.tl == 0) {
            rstd[w.row] = r;
        }
    }
}

/* dx = rstd * (g - xhat * mean(g * xhat)). */
KERNEL void rms_norm_backward_dx(GLOBAL T* dx ARG(0), GLOBAL const T* dy ARG(1),
                                 GLOBAL const T* x ARG(2), GLOBAL const T* gamma ARG(3),
                                 GLOBAL const T* rstd ARG(4),
                                 GLOBAL const int* P ARG(5) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    int C = P[1];
    for (int r0 = GROUP_ID * rt.teams; r0 < P[0]; r0 += NUM_GROUPS * rt.teams) {
        RmsRow w = rms_row(rt, r0, P[0], C);
        T r = w.active ? rstd[w.row] : (T)0.0;
        T m = rms_sum_g_xhat(buf, dy, x, gamma, r, w.base, C, w.active, rt) / (T)C;
        for (int j = w.active ? rt.tl : C; j < C; j += rt.tw) {
            T xhat = x[w.base + j] * r;
            dx[w.base + j] = r * (dy[w.base + j] * gamma[j] - xhat * m);
        }
    }
}
