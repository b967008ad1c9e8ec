/* Softmax over the last axis and its backward.
 *
 * Integer params P: [0] rows, [1] cols, [2] team width (see "row teams" below).
 * A row whose entries are all -inf has max -inf; exp(x - max) is then NaN, as the math
 * (and the CPU reference) says. NaN entries propagate through the sum to the whole row.
 */

/* -- row teams (the same block appears in every row-wise family: one source per program) --
 * A threadgroup splits into teams of `tw` threads, one row per team: tw is the whole group
 * (long rows) or a power of two <= 32 (short rows), so teams tile any group size Metal
 * picks (a multiple of 32). Every thread runs every barrier; a thread whose team has no
 * row contributes the identity. Threadgroup arrays hold up to RT_MAX_GROUP threads. */
#define RT_MAX_GROUP 1024

INLINE int rt_pow2_at_least(int n) {
    int p = 1;
    while (p < n) {
        p <<= 1;
    }
    return p;
}

/* Sum of v over the caller's team; every thread of the team gets it. */
INLINE T rt_team_sum(LOCAL T* buf, T v, int lid, int tw, int gsize) {
    int tl = lid % tw;
    buf[lid] = v;
    BARRIER();
    for (int h = rt_pow2_at_least(tw) >> 1; h > 0; h >>= 1) {
        if (tl < h && tl + h < tw && lid + h < gsize) {
            buf[lid] += buf[lid + h];
        }
        BARRIER();
    }
    T total = buf[lid - tl];
    BARRIER();
    return total;
}

/* Max of v over the caller's team; every thread of the team gets it. */
INLINE T rt_team_max(LOCAL T* buf, T v, int lid, int tw, int gsize) {
    int tl = lid % tw;
    buf[lid] = v;
    BARRIER();
    for (int h = rt_pow2_at_least(tw) >> 1; h > 0; h >>= 1) {
        if (tl < h && tl + h < tw && lid + h < gsize) {
            buf[lid] = fmax(buf[lid], buf[lid + h]);
        }
        BARRIER();
    }
    T total = buf[lid - tl];
    BARRIER();
    return total;
}

/* exp(m_from - m_to) with an empty side (max -inf) contributing exactly 0. */
INLINE T rt_rescale(T m_from, T m_to) {
    return m_from == -INFINITY_T ? (T)0.0 : exp(m_from - m_to);
}

/* Merge (max, sum of exp(x - max)) pairs over the team; the result is left in
 * mb[lid - lid % tw], sb[...]. The caller reads it, then issues BARRIER(). */
INLINE void rt_team_merge(LOCAL T* mb, LOCAL T* sb, T m, T s, int lid, int tw, int gsize) {
    int tl = lid % tw;
    mb[lid] = m;
    sb[lid] = s;
    BARRIER();
    for (int h = rt_pow2_at_least(tw) >> 1; h > 0; h >>= 1) {
        if (tl < h && tl + h < tw && lid + h < gsize) {
            T m1 = mb[lid];
            T m2 = mb[lid + h];
            T mm = fmax(m1, m2);
            sb[lid] = sb[lid] * rt_rescale(m1, mm) + sb[lid + h] * rt_rescale(m2, mm);
            mb[lid] = mm;
        }
        BARRIER();
    }
}

/* Online (max, sum) update with one element; -inf elements add nothing. */
#define RT_ONLINE(m, s, v)                                           \
    do {                                                             \
        T rt_v_ = (v);                                               \
        if (rt_v_ > (m)) {                                           \
            (s) = (s) * rt_rescale((m), rt_v_) + (T)1.0;             \
            (m) = rt_v_;                                             \
        } else {                                                     \
            (s) += rt_v_ == -INFINITY_T ? (T)0.0 : exp(rt_v_ - (m)); \
        }                                                            \
    } while (0)

/* -- end of row teams -- */

/* Max, then exp(x - max) stored in y while summing, then y /= sum: one exp per element. */
KERNEL void softmax_forward(GLOBAL T* y ARG(0), GLOBAL const T* x ARG(1),
                            GLOBAL const int* P ARG(2) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int cols = P[1];
    int tw = P[2] >= GROUP_SIZE ? GROUP_SIZE : P[2];
    int teams = GROUP_SIZE / tw;
    int team = LID / tw;
    int tl = LID - team * tw;
    for (int r0 = GROUP_ID * teams; r0 < rows; r0 += NUM_GROUPS * teams) {
        int row = r0 + team;
        int active = team < teams && row < rows;
        long base = (long)row * cols;
        T m = -INFINITY_T;
        if (active) {
            for (int j = tl; j < cols; j += tw) {
                m = fmax(m, x[base + j]);
            }
        }
        T row_max = rt_team_max(buf, m, LID, tw, GROUP_SIZE);
        T acc = (T)0.0;
        if (active) {
            for (int j = tl; j < cols; j += tw) {
                T e = exp(x[base + j] - row_max);
                y[base + j] = e;
                acc += e;
            }
        }
        T row_sum = rt_team_sum(buf, acc, LID, tw, GROUP_SIZE);
        if (active) {
            for (int j = tl; j < cols; j += tw) {
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
    int tw = P[2] >= GROUP_SIZE ? GROUP_SIZE : P[2];
    int teams = GROUP_SIZE / tw;
    int team = LID / tw;
    int tl = LID - team * tw;
    for (int r0 = GROUP_ID * teams; r0 < rows; r0 += NUM_GROUPS * teams) {
        int row = r0 + team;
        int active = team < teams && row < rows;
        long base = (long)row * cols;
        T acc = (T)0.0;
        if (active) {
            for (int j = tl; j < cols; j += tw) {
                acc += dy[base + j] * y[base + j];
            }
        }
        T dot = rt_team_sum(buf, acc, LID, tw, GROUP_SIZE);
        if (active) {
            for (int j = tl; j < cols; j += tw) {
                dx[base + j] = y[base + j] * (dy[base + j] - dot);
            }
        }
    }
}
