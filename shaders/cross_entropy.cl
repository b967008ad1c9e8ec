/* Cross-entropy over rows of logits [N, V] with integer targets (IDX; -1 = ignored).
 *
 * Integer params P: [0] N, [1] V; the forward adds [2] team width (see rows.h); the last
 * int is the status slot (status.h): P[3] forward, P[2] backward.
 * Forward: online (max, sum-of-exp, classes) per thread, merged across the row's team;
 * lse = max + log(sum). Backward is elementwise: dlogits = dloss * (exp(logit - lse) -
 * onehot), and dloss * 0 for ignored rows (0 unless a term is NaN or infinite, as in IEEE
 * arithmetic).
 * Specials (specials.h), decided on loaded bit patterns: -inf logits add nothing (a -inf
 * target logit gives loss +inf); a row with a NaN or +inf logit, or with no finite logit,
 * has lse = NaN and loss = NaN (0 when ignored), as IEEE max-subtracted arithmetic gives.
 * A target outside [-1, V) is never used as an index: the row counts as ignored and the
 * kernel records it in the status buffer (status.h); the host raises at the next sync.
 * Logits and their gradient are TS, computed in T (half.h): for float16 / bfloat16 the
 * logits load to float and each dlogit is rounded once when stored; the loss rows, lse
 * and dloss stay T (float32), as the op unit says.
 */

#include "rows.h"
#include "status.h"
#include "half.h"

/* Whether t is -1 (ignored) or a valid class index. */
INLINE int ce_target_ok(IDX t, int V) {
    return t >= (IDX)-1 && t < (IDX)V;
}

KERNEL void cross_entropy_forward(GLOBAL T* loss ARG(0), GLOBAL T* lse ARG(1),
                                  GLOBAL const TS* logits ARG(2), GLOBAL const IDX* targets ARG(3),
                                  GLOBAL STATUS_T* status ARG(4), GLOBAL const int* P ARG(5)
                                  THREAD_ARGS) {
    LOCAL T mb[RT_MAX_GROUP];
    LOCAL T sb[RT_MAX_GROUP];
    LOCAL int cb[RT_MAX_GROUP];
    int N = P[0];
    int V = P[1];
    RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
    for (int r0 = GROUP_ID * rt.teams; r0 < N; r0 += NUM_GROUPS * rt.teams) {
        int row = r0 + rt.team;
        int active = rt_active(rt, row, N);
        long base = (long)row * V;
        T m = RIFTCO_LOWEST;
        T s = (T)0.0;
        int cls = 0;
        if (active) {
            for (int j = rt.tl; j < V; j += rt.tw) {
                RT_ONLINE(m, s, cls, LOAD(logits, base + j));
            }
        }
        rt_team_merge(mb, sb, cb, m, s, cls, rt);
        if (active && rt.tl == 0) {
            int normal = cb[LID] == RS_FINITE;
            T l = normal ? mb[LID] + PRECISE_LOG(sb[LID]) : RIFTCO_NAN;
            IDX t = targets[row];
            T out = (T)0.0;
            if (!ce_target_ok(t, V)) {
                riftco_flag_index(status, RIFTCO_OP_CROSS_ENTROPY, P[3], t);
            } else if (t >= 0) {
                T picked = LOAD(logits, base + (long)t);
                out = !normal ? RIFTCO_NAN : (RIFTCO_ISNEGINF(picked) ? RIFTCO_INF : l - picked);
            }
            lse[row] = l;
            loss[row] = out;
        }
        BARRIER();
    }
}

KERNEL void cross_entropy_backward(GLOBAL TS* dlogits ARG(0), GLOBAL const T* dloss ARG(1),
                                   GLOBAL const TS* logits ARG(2), GLOBAL const IDX* targets ARG(3),
                                   GLOBAL const T* lse ARG(4), GLOBAL STATUS_T* status ARG(5),
                                   GLOBAL const int* P ARG(6) THREAD_ARGS) {
    int N = P[0];
    int V = P[1];
    long total = (long)N * V;
    for (long e = GID; e < total; e += GLOBAL_SIZE) {
        long row = e / V;
        long j = e - row * V;
        IDX t = targets[row];
        int ok = ce_target_ok(t, V);
        if (!ok && j == 0) {
            riftco_flag_index(status, RIFTCO_OP_CROSS_ENTROPY_BACKWARD, P[2], t);
        }
        T p = rs_exp_diff(LOAD(logits, e), lse[row]);
        T d = dloss[row];
        T g;
        if (ok && t >= 0) {
            g = (p - ((long)t == j ? (T)1.0 : (T)0.0)) * d;
        } else {
            /* p * (d * 0): zero, or NaN when either factor is NaN or infinite (IEEE) */
            g = RIFTCO_ISFINITE(p) && RIFTCO_ISFINITE(d) ? (T)0.0 : RIFTCO_NAN;
        }
        STORE(dlogits, e, g);
    }
}
