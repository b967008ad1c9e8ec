/* Materialised attention: the host computes the products with the backend's matmul and
 * these row kernels fuse everything between them (scale, causal mask, softmax; and the
 * softmax VJP). Rows are handled by teams (see rows.h).
 * Integer params P: [0] rows (= BH * T), [1] T, [2] team width, [3] causal.
 * Float params F: [0] scale.
 */

#include "rows.h"

/* In place on scores [rows, T] (the product q k^T): each row becomes
 * softmax_j(scale * s_ij) over j <= i (causal, by index) or all j; masked entries become
 * exactly 0. Specials as in softmax.cl, decided on the loaded scores: a row with a NaN or
 * +inf visible score, or with no finite one, is NaN in its visible entries; its masked
 * entries stay exactly 0 (by index, so fast math cannot change it). */
KERNEL void attention_softmax(GLOBAL T* s ARG(0), GLOBAL const int* P ARG(1),
                              GLOBAL const T* F ARG(2) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    LOCAL int cbuf[RT_MAX_GROUP];
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
        /* Classes of the loaded scores; the maximum is of the finite scores, scaled. */
        T m = RIFTCO_LOWEST;
        int cls = 0;
        if (active) {
            for (int j = rt.tl; j < jend; j += rt.tw) {
                T v = s[base + j];
                int c = rs_class(v);
                cls |= c;
                m = c == RS_FINITE ? fmax(m, v * scale) : m;
            }
        }
        RtMax rm = rt_team_max_class(buf, cbuf, m, cls, rt);
        int normal = rm.cls == RS_FINITE;
        T acc = (T)0.0;
        if (active && normal) {
            for (int j = rt.tl; j < Tn; j += rt.tw) {
                T v = s[base + j];
                T e = j < jend && RIFTCO_ISFINITE(v) ? rs_exp(v * scale - rm.m) : (T)0.0;
                s[base + j] = e;
                acc += e;
            }
        }
        T row_sum = rt_team_sum(buf, acc, rt);
        if (active) {
            for (int j = rt.tl; j < Tn; j += rt.tw) {
                T e = s[base + j];
                s[base + j] = j >= jend ? (T)0.0 : (!normal ? RIFTCO_NAN : e / row_sum);
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
