/* Materialised attention: the host computes the products with the backend's matmul and
 * these row kernels fuse everything between them (scale, causal mask, softmax; and the
 * softmax VJP). Rows are handled by teams (see rows.h).
 * Integer params P: [0] rows (= BH * T), [1] T, [2] team width, [3] causal.
 * Float params F: [0] scale.
 */

#include "rows.h"

/* In place on scores [rows, T] (the product q k^T): each row becomes
 * softmax_j(scale * s_ij) over j <= i (causal) or all j; masked entries become exactly 0. */
KERNEL void attention_softmax(GLOBAL T* s ARG(0), GLOBAL const int* P ARG(1),
                              GLOBAL const T* F ARG(2) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int Tn = P[1];
    int causal = P[3];
    T scale = F[0];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, rows);
        long base = (long)row * Tn;
        int jend = causal ? row % Tn + 1 : Tn;
        T m = -INFINITY_T;
        if (active) {
            for (int j = rt.tl; j < jend; j += rt.tw) {
                m = fmax(m, s[base + j] * scale);
            }
        }
        T row_max = rt_team_max(buf, m, rt);
        T acc = (T)0.0;
        if (active) {
            for (int j = rt.tl; j < Tn; j += rt.tw) {
                T e = j < jend ? exp(s[base + j] * scale - row_max) : (T)0.0;
                s[base + j] = e;
                acc += e;
            }
        }
        T row_sum = rt_team_sum(buf, acc, rt);
        if (active) {
            for (int j = rt.tl; j < jend; j += rt.tw) {
                s[base + j] = s[base + j] / row_sum;
            }
        }
    }
}

/* In place on dp [rows, T] (the product dout v^T): ds = scale * p * (dp - sum_j p dp). */
KERNEL void attention_backward_ds(GLOBAL T* dp ARG(0), GLOBAL const T* probs ARG(1),
                                  GLOBAL const int* P ARG(2), GLOBAL const T* F ARG(3)
                                  THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int Tn = P[1];
    T scale = F[0];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, rows);
        long base = (long)row * Tn;
        T acc = (T)0.0;
        if (active) {
            for (int j = rt.tl; j < Tn; j += rt.tw) {
                acc += probs[base + j] * dp[base + j];
            }
        }
        T rowdot = rt_team_sum(buf, acc, rt);
        if (active) {
            for (int j = rt.tl; j < Tn; j += rt.tw) {
                dp[base + j] = scale * probs[base + j] * (dp[base + j] - rowdot);
            }
        }
    }
}
