/* Row teams: the reduction helpers of every row-wise family (softmax, layer_norm,
 * cross-entropy, attention). Included with #include "rows.h" after the type defines; the
 * host inlines it (sources.py), so Metal sees one source string too.
 *
 * A threadgroup splits into teams of `tw` threads, one row per team: tw is the whole group
 * (long rows) or a power of two <= 32 (short rows), so teams tile any group size Metal
 * picks (a multiple of 32). Every thread runs every barrier; a thread whose team has no
 * row contributes the identity. Threadgroup arrays hold up to RT_MAX_GROUP threads.
 *
 * Kernel shape:
 *     RowTeam rt = rt_team(P[2], LID, GROUP_SIZE);
 *     for (int r0 = GROUP_ID * rt.teams; r0 < rows; r0 += NUM_GROUPS * rt.teams) {
 *         int row = r0 + rt.team;
 *         int active = rt_active(rt, row, rows);
 *         ... strided loops j = rt.tl; j < cols; j += rt.tw, guarded by active ...
 *         T total = rt_team_sum(buf, partial, rt);   (every thread, active or not)
 *     }
 */
#ifndef RIFTCO_ROWS_H
#define RIFTCO_ROWS_H

#include "specials.h"

#define RT_MAX_GROUP 1024

/* This thread's place: team width tw (the requested width clamped to the group), teams
 * per group, its team and its lane in the team; lid and gsize ride along for the
 * reductions (helpers cannot read LID / GROUP_SIZE on Metal). */
typedef struct {
    int tw;
    int teams;
    int team;
    int tl;
    int lid;
    int gsize;
} RowTeam;

INLINE RowTeam rt_team(int width, int lid, int gsize) {
    RowTeam rt;
    rt.tw = width >= gsize ? gsize : width;
    rt.teams = gsize / rt.tw;
    rt.team = lid / rt.tw;
    rt.tl = lid - rt.team * rt.tw;
    rt.lid = lid;
    rt.gsize = gsize;
    return rt;
}

/* Whether this thread's team owns `row` this round (else it only joins the barriers). */
INLINE int rt_active(RowTeam rt, int row, int rows) {
    return rt.team < rt.teams && row < rows;
}

INLINE int rt_pow2_at_least(int n) {
    int p = 1;
    while (p < n) {
        p <<= 1;
    }
    return p;
}

/* Sum of v over the caller's team; every thread of the team gets it. */
INLINE T rt_team_sum(LOCAL_PTR T* buf, T v, RowTeam rt) {
    int lid = rt.lid;
    buf[lid] = v;
    BARRIER();
    for (int h = rt_pow2_at_least(rt.tw) >> 1; h > 0; h >>= 1) {
        if (rt.tl < h && rt.tl + h < rt.tw && lid + h < rt.gsize) {
            buf[lid] += buf[lid + h];
        }
        BARRIER();
    }
    T total = buf[lid - rt.tl];
    BARRIER();
    return total;
}

/* Max of the finite entries and OR of the entry classes (specials.h) over the caller's
 * team; every thread of the team gets both. m starts at RIFTCO_LOWEST, a finite sentinel:
 * whether it is a real maximum is told by RS_FINITE in cls, never by its value. */
typedef struct {
    T m;
    int cls;
} RtMax;

INLINE RtMax rt_team_max_class(LOCAL_PTR T* buf, LOCAL_PTR int* cbuf, T m, int cls,
                               RowTeam rt) {
    int lid = rt.lid;
    buf[lid] = m;
    cbuf[lid] = cls;
    BARRIER();
    for (int h = rt_pow2_at_least(rt.tw) >> 1; h > 0; h >>= 1) {
        if (rt.tl < h && rt.tl + h < rt.tw && lid + h < rt.gsize) {
            buf[lid] = fmax(buf[lid], buf[lid + h]);
            cbuf[lid] |= cbuf[lid + h];
        }
        BARRIER();
    }
    RtMax r;
    r.m = buf[lid - rt.tl];
    r.cls = cbuf[lid - rt.tl];
    BARRIER();
    return r;
}

/* s * exp(m_from - m_to) for a partial (m_from, s) rescaled to the larger max m_to; an
 * empty partial (s = 0, m_from the sentinel) stays 0 without computing sentinel - max. */
INLINE T rt_rescale(T s, T m_from, T m_to) {
    return s > (T)0.0 ? s * rs_exp(m_from - m_to) : (T)0.0;
}

/* Merge (max, sum of exp(x - max), classes) triples over the team; the result is left in
 * mb[lid - tl], sb[lid - tl], cb[lid - tl]. The caller reads it, then issues BARRIER(). */
INLINE void rt_team_merge(LOCAL_PTR T* mb, LOCAL_PTR T* sb, LOCAL_PTR int* cb, T m, T s,
                          int cls, RowTeam rt) {
    int lid = rt.lid;
    mb[lid] = m;
    sb[lid] = s;
    cb[lid] = cls;
    BARRIER();
    for (int h = rt_pow2_at_least(rt.tw) >> 1; h > 0; h >>= 1) {
        if (rt.tl < h && rt.tl + h < rt.tw && lid + h < rt.gsize) {
            T m1 = mb[lid];
            T m2 = mb[lid + h];
            T mm = fmax(m1, m2);
            sb[lid] = rt_rescale(sb[lid], m1, mm) + rt_rescale(sb[lid + h], m2, mm);
            mb[lid] = mm;
            cb[lid] |= cb[lid + h];
        }
        BARRIER();
    }
}

/* Online (max, sum, classes) update with one loaded entry. m starts at RIFTCO_LOWEST and s
 * at 0; -inf entries add nothing, NaN and +inf only set RS_POISON (see specials.h). */
#define RT_ONLINE(m, s, cls, v)                                      \
    do {                                                             \
        T rt_v_ = (v);                                               \
        int rt_c_ = rs_class(rt_v_);                                 \
        (cls) |= rt_c_;                                              \
        if (rt_c_ == RS_FINITE) {                                    \
            if (rt_v_ > (m)) {                                       \
                (s) = rt_rescale((s), (m), rt_v_) + (T)1.0;          \
                (m) = rt_v_;                                         \
            } else {                                                 \
                (s) += rs_exp(rt_v_ - (m));                          \
            }                                                        \
        }                                                            \
    } while (0)

#endif /* RIFTCO_ROWS_H */
