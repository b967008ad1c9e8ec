/* Cross-entropy over rows of logits [N, V] with integer targets (IDX; -1 = ignored).
 *
 * Integer params P: [0] N, [1] V; the forward adds [2] team width (see rows.h).
 * Forward: online (max, sum-of-exp) per thread, merged across the row's team; lse = max +
 * log(sum). Backward is elementwise: dlogits = dloss * (exp(logit - lse) - onehot), zero
 * for ignored rows.
 */

#include "rows.h"

KERNEL void cross_entropy_forward(GLOBAL T* loss ARG(0), GLOBAL T* lse ARG(1),
                                  GLOBAL const T* logits ARG(2), GLOBAL const IDX* targets ARG(3),
                                  GLOBAL const int* P ARG(4) THREAD_ARGS) {
    LOCAL T mb[RT_MAX_GROUP];
    LOCAL T sb[RT_MAX_GROUP];
    int N = P[0];
    int V = P[1];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < N; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, N);
        long base = (long)row * V;
        T m = -INFINITY_T;
        T s = (T)0.0;
        if (active) {
            for (int j = rt.tl; j < V; j += rt.tw) {
                RT_ONLINE(m, s, logits[base + j]);
            }
        }
        rt_team_merge(mb, sb, m, s, rt);
        if (active && rt.tl == 0) {
            T l = mb[LID] + log(sb[LID]);
            long t = (long)targets[row];
            lse[row] = l;
            loss[row] = t < 0 ? (T)0.0 : l - logits[base + t];
        }
        BARRIER();
    }
}

KERNEL void cross_entropy_backward(GLOBAL T* dlogits ARG(0), GLOBAL const T* dloss ARG(1),
                                   GLOBAL const T* logits ARG(2), GLOBAL const IDX* targets ARG(3),
                                   GLOBAL const T* lse ARG(4), GLOBAL const int* P ARG(5)
                                   THREAD_ARGS) {
    int N = P[0];
    int V = P[1];
    long total = (long)N * V;
    for (long e = GID; e < total; e += GLOBAL_SIZE) {
        long row = e / V;
        long j = e - row * V;
        long t = (long)targets[row];
        T g = (T)0.0;
        if (t >= 0) {
            g = exp(logits[e] - lse[row]) - (j == t ? (T)1.0 : (T)0.0);
            g *= dloss[row];
        }
        dlogits[e] = g;
    }
}
