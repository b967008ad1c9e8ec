/* Softmax over the last axis and its backward.
 *
 * Integer params P: [0] rows, [1] cols, [2] team width (see rows.h).
 * Specials, decided on the loaded entries' bit patterns (specials.h), never by comparing
 * with -inf: -inf entries give exactly 0; a row with a NaN or +inf entry, or with no
 * finite entry at all (all -inf), is NaN throughout, which is what max-subtracted IEEE
 * arithmetic gives (+inf - +inf, -inf - -inf).
 */

#include "rows.h"

/* Max of the finite entries (and the row's classes), then exp(x - max) stored in y while
 * summing, then y /= sum: one exp per element. */
KERNEL void softmax_forward(GLOBAL T* y ARG(0), GLOBAL const T* x ARG(1),
                            GLOBAL const int* P ARG(2) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    LOCAL int cbuf[RT_MAX_GROUP];
    int rows = P[0];
    int cols = P[1];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, rows);
        long base = (long)row * cols;
        T m = RIFTCO_LOWEST;
        int cls = 0;
        if (active) {
            for (int j = rt.tl; j < cols; j += rt.tw) {
                T v = x[base + j];
                int c = rs_class(v);
                cls |= c;
                m = c == RS_FINITE ? fmax(m, v) : m;
            }
        }
        RtMax rm = rt_team_max_class(buf, cbuf, m, cls, rt);
        int normal = rm.cls == RS_FINITE;
        T acc = (T)0.0;
        if (active && normal) {
            for (int j = rt.tl; j < cols; j += rt.tw) {
                T v = x[base + j];
                T e = RIFTCO_ISFINITE(v) ? rs_exp(v - rm.m) : (T)0.0;
                y[base + j] = e;
                acc += e;
            }
        }
        T row_sum = rt_team_sum(buf, acc, rt);
        if (active) {
            for (int j = rt.tl; j < cols; j += rt.tw) {
                y[base + j] = normal ? y[base + j] / row_sum : RIFTCO_NAN;
            }
        }
    }
}

KERNEL void softmax_backward(GLOBAL T* dx ARG(0), GLOBAL const T* dy ARG(1),
                             GLOBAL const T* y ARG(2), GLOBAL const int* P ARG(3) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int cols = P[1];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, rows);
        long base = (long)row * cols;
        T acc = (T)0.0;
        if (active) {
            for (int j = rt.tl; j < cols; j += rt.tw) {
                acc += dy[base + j] * y[base + j];
            }
        }
        T dot = rt_team_sum(buf, acc, rt);
        if (active) {
            for (int j = rt.tl; j < cols; j += rt.tw) {
                dx[base + j] = y[base + j] * (dy[base + j] - dot);
            }
        }
    }
}
