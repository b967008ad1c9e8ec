/* Softmax over the last axis and its backward.
 *
 * Integer params P: [0] rows, [1] cols, [2] team width (see rows.h).
 * Specials, decided on the loaded entries' bit patterns (specials.h), never by comparing
 * with -inf: -inf entries give exactly 0; a row with a NaN or +inf entry, or with no
 * finite entry at all (all -inf), is NaN throughout, which is what max-subtracted IEEE
 * arithmetic gives (+inf - +inf, -inf - -inf).
 *
 * Tensors are TS, computed in T (half.h): for float16 / bfloat16 the entries load to
 * float and each result is rounded once when stored, so the forward does not park the
 * unnormalised exp in y (that would round it twice): it takes the exp again in the last
 * pass instead (the same expression, the same value).
 */

#include "rows.h"
#include "half.h"
#if defined(RIFTCO_STORAGE_F16) || defined(RIFTCO_STORAGE_BF16)
#define SM_STORE_EXP 0
#else
#define SM_STORE_EXP 1
#endif

/* Max of the finite entries (and the row's classes), then exp(x - max) stored in y while
 * summing, then y /= sum: one exp per element. */
KERNEL void softmax_forward(GLOBAL TS* y ARG(0), GLOBAL const TS* x ARG(1),
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
                T v = LOAD(x, base + j);
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
                T v = LOAD(x, base + j);
                T e = RIFTCO_ISFINITE(v) ? rs_exp(v - rm.m) : (T)0.0;
#if SM_STORE_EXP
                y[base + j] = e;
#endif
                acc += e;
            }
        }
        T row_sum = rt_team_sum(buf, acc, rt);
        if (active) {
            for (int j = rt.tl; j < cols; j += rt.tw) {
#if SM_STORE_EXP
                y[base + j] = normal ? y[base + j] / row_sum : RIFTCO_NAN;
#else
                T v = LOAD(x, base + j);
                T e = normal && RIFTCO_ISFINITE(v) ? rs_exp(v - rm.m) : (T)0.0;
                STORE(y, base + j, normal ? e / row_sum : RIFTCO_NAN);
#endif
            }
        }
    }
}

KERNEL void softmax_backward(GLOBAL TS* dx ARG(0), GLOBAL const TS* dy ARG(1),
                             GLOBAL const TS* y ARG(2), GLOBAL const int* P ARG(3) THREAD_ARGS) {
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
                acc += LOAD(dy, base + j) * LOAD(y, base + j);
            }
        }
        T dot = rt_team_sum(buf, acc, rt);
        if (active) {
            for (int j = rt.tl; j < cols; j += rt.tw) {
                STORE(dx, base + j, LOAD(y, base + j) * (LOAD(dy, base + j) - dot));
            }
        }
    }
}
