/* Materialised attention: the host computes the products with the backend's matmul and
 * these row kernels fuse everything between them (scale, causal mask, softmax; and the
 * softmax VJP). Rows are handled by teams (see "row teams" below).
 * Integer params P: [0] rows (= BH * T), [1] T, [2] team width, [3] causal.
 * Float params F: [0] scale.
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

/* In place on scores [rows, T] (the product q k^T): each row becomes
 * softmax_j(scale * s_ij) over j <= i (causal) or all j; masked entries become exactly 0. */
KERNEL void attention_softmax(GLOBAL T* s ARG(0), GLOBAL const int* P ARG(1),
                              GLOBAL const T* F ARG(2) THREAD_ARGS) {
    LOCAL T buf[RT_MAX_GROUP];
    int rows = P[0];
    int Tn = P[1];
    int causal = P[3];
    T scale = F[0];
    int tw = P[2] >= GROUP_SIZE ? GROUP_SIZE : P[2];
    int teams = GROUP_SIZE / tw;
    int team = LID / tw;
    int tl = LID - team * tw;
    for (int r0 = GROUP_ID * teams; r0 < rows; r0 += NUM_GROUPS * teams) {
        int row = r0 + team;
        int active = team < teams && row < rows;
        long base = (long)row * Tn;
        int jend = causal ? row % Tn + 1 : Tn;
        T m = -INFINITY_T;
        if (active) {
            for (int j = tl; j < jend; j += tw) {
                m = fmax(m, s[base + j] * scale);
            }
        }
        T row_max = rt_team_max(buf, m, LID, tw, GROUP_SIZE);
        T acc = (T)0.0;
        if (active) {
            for (int j = tl; j < Tn; j += tw) {
                T e = j < jend ? exp(s[base + j] * scale - row_max) : (T)0.0;
                s[base + j] = e;
                acc += e;
            }
        }
        T row_sum = rt_team_sum(buf, acc, LID, tw, GROUP_SIZE);
        if (active) {
            for (int j = tl; j < jend; j += tw) {
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
    int tw = P[2] >= GROUP_SIZE ? GROUP_SIZE : P[2];
    int teams = GROUP_SIZE / tw;
    int team = LID / tw;
    int tl = LID - team * tw;
    for (int r0 = GROUP_ID * teams; r0 < rows; r0 += NUM_GROUPS * teams) {
        int row = r0 + team;
        int active = team < teams && row < rows;
        long base = (long)row * Tn;
        T acc = (T)0.0;
        if (active) {
            for (int j = tl; j < Tn; j += tw) {
                acc += probs[base + j] * dp[base + j];
            }
        }
        T rowdot = rt_team_sum(buf, acc, LID, tw, GROUP_SIZE);
        if (active) {
            for (int j = tl; j < Tn; j += tw) {
                dp[base + j] = scale * probs[base + j] * (dp[base + j] - rowdot);
            }
        }
    }
}
