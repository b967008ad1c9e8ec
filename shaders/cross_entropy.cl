/* Cross-entropy over rows of logits [N, V] with integer targets (IDX; -1 = ignored).
 *
 * Integer params P: [0] N, [1] V; the forward adds [2] team width (see "row teams").
 * Forward: online (max, sum-of-exp) per thread, merged across the row's team; lse = max +
 * log(sum). Backward is elementwise: dlogits = dloss * (exp(logit - lse) - onehot), zero
 * for ignored rows.
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

KERNEL void cross_entropy_forward(GLOBAL T* loss ARG(0), GLOBAL T* lse ARG(1),
                                  GLOBAL const T* logits ARG(2), GLOBAL const IDX* targets ARG(3),
                                  GLOBAL const int* P ARG(4) THREAD_ARGS) {
    LOCAL T mb[RT_MAX_GROUP];
    LOCAL T sb[RT_MAX_GROUP];
    int N = P[0];
    int V = P[1];
    int tw = P[2] >= GROUP_SIZE ? GROUP_SIZE : P[2];
    int teams = GROUP_SIZE / tw;
    int team = LID / tw;
    int tl = LID - team * tw;
    for (int r0 = GROUP_ID * teams; r0 < N; r0 += NUM_GROUPS * teams) {
        int row = r0 + team;
        int active = team < teams && row < N;
        long base = (long)row * V;
        T m = -INFINITY_T;
        T s = (T)0.0;
        if (active) {
            for (int j = tl; j < V; j += tw) {
                RT_ONLINE(m, s, logits[base + j]);
            }
        }
        rt_team_merge(mb, sb, m, s, LID, tw, GROUP_SIZE);
        if (active && tl == 0) {
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
