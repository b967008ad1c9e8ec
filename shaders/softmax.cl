/* Softmax over the last axis and its backward.
 *
 * Integer params P: [0] rows, [1] cols, [2] team width (see rows.h).
 * A row whose entries are all -inf has max -inf; exp(x - max) is then NaN, as the math
 * (and the CPU reference) says. NaN entries propagate through the sum to the whole row.
 */

#include "rows.h"

/* Max, then exp(x - max) stored in y while summing, then y /= sum: one exp per element. */
KERNEL void softmax_forward(GLOBAL T* y ARG(0), GLOBAL const T* x ARG(1),
                            GLOBAL const int* P ARG(2) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int cols = P[1];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, rows);
        long base = (long)row * cols;
        T m = -INFINITY_T;
        if (active) {
            for (int j = rt.tl; j < cols; j += rt.tw) {
                m = fmax(m, x[base + j]);
            }
        }
        T row_max = rt_team_max(buf, m, rt);
        T acc = (T)0.0;
        if (active) {
            for (int j = rt.tl; j < cols; j += rt.tw) {
                T e = exp(x[base + j] - row_max);
                y[base + j] = e;
                acc += e;
            }
        }
        T row_sum = rt_team_sum(buf, acc, rt);
        if (active) {
            for (int j = rt.tl; j < cols; j += rt.tw) {
                y[base + j] = y[base + j] / row_sum;
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
