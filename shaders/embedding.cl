/* Embedding gather and its deterministic scatter-add backward.
 *
 * Integer params P: [0] n (number of ids), [1] C (row width), [2] V (table rows); the
 * kernels that check ids add [3] their status slot (status.h), the radix kernels [3] chunks
 * K, [4] chunk length S, [5] digit shift.
 * ids have the host's index type IDX (int or long). An id outside [0, V) never addresses
 * memory: its output row is zeros (forward) or it adds nothing (backward), and the kernel
 * records it in the status buffer (status.h), which the host reads at the next sync.
 *
 * Backward, O(n + V * C) instead of one pass over every id per output element:
 *   1. embedding_sort_init: key[i] = ids[i] (V for a bad id: it sorts last), pos[i] = i;
 *   2. an LSD radix sort of (key, pos) by 8-bit digits, stable, one pass per digit of V:
 *      radix_count (per chunk of S ids, a histogram of digits), radix_scan (one
 *      threadgroup: exclusive prefix sum over digit-major counts, integers only) and
 *      radix_scatter (each chunk writes its ids in order at its digits' offsets);
 *   3. embedding_segments: starts[v] = first sorted slot whose key is >= v (binary search);
 *   4. embedding_backward_rows: thread (v, c) sums dy[pos[k], c] over its segment, in
 *      increasing k, i.e. in increasing position, in blocks (BlockSum, specials.h: a
 *      padding id repeated a million times errs by a few dozen ulp, not thousands).
 * Integer counting makes the sort independent of thread timing, and a stable sort keeps
 * each segment in position order, so every (v, c) is summed in one fixed order (that of
 * a sequential scatter-add for up to 32 repeats): the same bits on every run and every
 * group size, without float atomics.
 * embedding_backward (one thread per output element, walking every id) is the same sum
 * for tiny problems, where one launch beats six.
 */

#include "specials.h"
#include "status.h"

/* RADIX_BITS, the digit width, comes from the host (core/kernel_host/shader_defines.py),
 * which sizes the counts buffer and steps the passes by it. */
#define RADIX_BINS (1 << RADIX_BITS)
#define RADIX_MAX_GROUP 1024

KERNEL void embedding_forward(GLOBAL T* out ARG(0), GLOBAL const T* table ARG(1),
                              GLOBAL const IDX* ids ARG(2), GLOBAL STATUS_T* status ARG(3),
                              GLOBAL const int* P ARG(4) THREAD_ARGS) {
    int n = P[0];
    int C = P[1];
    int V = P[2];
    long total = (long)n * C;
    for (long t = GID; t < total; t += GLOBAL_SIZE) {
        long i = t / C;
        long c = t - i * C;
        IDX id = ids[i];
        if (id >= 0 && id < (IDX)V) {
            out[t] = table[(long)id * C + c];
        } else {
            out[t] = (T)0.0;
            if (c == 0) {
                riftco_flag_index(status, RIFTCO_OP_EMBEDDING, P[3], id);
            }
        }
    }
}

/* Direct form for tiny problems: thread (v, c) walks every id in order. */
KERNEL void embedding_backward(GLOBAL T* dtable ARG(0), GLOBAL const T* dy ARG(1),
                               GLOBAL const IDX* ids ARG(2), GLOBAL STATUS_T* status ARG(3),
                               GLOBAL const int* P ARG(4) THREAD_ARGS) {
    int n = P[0];
    int C = P[1];
    int V = P[2];
    long total = (long)V * C;
    for (long t = GID; t < total; t += GLOBAL_SIZE) {
        long v = t / C;
        long c = t - v * C;
        BlockSum acc = bsum_init((T)0.0);
        for (int i = 0; i < n; i++) {
            IDX id = ids[i];
            if ((long)id == v) {
                acc = bsum_add(acc, dy[(long)i * C + c]);
            } else if (t == 0 && !(id >= 0 && id < (IDX)V)) {
                riftco_flag_index(status, RIFTCO_OP_EMBEDDING_BACKWARD, P[3], id);
            }
        }
        dtable[t] = bsum_total(acc);
    }
}

KERNEL void embedding_sort_init(GLOBAL int* keys ARG(0), GLOBAL int* pos ARG(1),
                                GLOBAL const IDX* ids ARG(2), GLOBAL STATUS_T* status ARG(3),
                                GLOBAL const int* P ARG(4) THREAD_ARGS) {
    int n = P[0];
    int V = P[2];
    for (int i = GID; i < n; i += GLOBAL_SIZE) {
        IDX id = ids[i];
        int ok = id >= 0 && id < (IDX)V;
        keys[i] = ok ? (int)id : V;
        pos[i] = i;
        if (!ok) {
            riftco_flag_index(status, RIFTCO_OP_EMBEDDING_BACKWARD, P[3], id);
        }
    }
}

/* counts[d * K + k] = how many keys of chunk k have digit d. One thread per chunk. */
KERNEL void radix_count(GLOBAL int* counts ARG(0), GLOBAL const int* keys ARG(1),
                        GLOBAL const int* P ARG(2) THREAD_ARGS) {
    int n = P[0];
    int K = P[3];
    int S = P[4];
    int shift = P[5];
    for (int k = GID; k < K; k += GLOBAL_SIZE) {
        for (int d = 0; d < RADIX_BINS; d++) {
            counts[d * K + k] = 0;
        }
        int end = (k + 1) * S < n ? (k + 1) * S : n;
        for (int i = k * S; i < end; i++) {
            counts[((keys[i] >> shift) & (RADIX_BINS - 1)) * K + k] += 1;
        }
    }
}

/* In place: counts becomes its exclusive prefix sum (P[3] * RADIX_BINS entries). One
 * threadgroup of any size: each thread owns a contiguous range, sums it, thread 0 scans
 * the range totals, then each thread rewrites its range from its offset. */
KERNEL void radix_scan(GLOBAL int* counts ARG(0), GLOBAL const int* P ARG(1) THREAD_ARGS) {
    LOCAL int part[RADIX_MAX_GROUP];
    int total = P[3] * RADIX_BINS;
    int lid = LID;
    int gsize = GROUP_SIZE;
    int per = (total + gsize - 1) / gsize;
    int begin = lid * per < total ? lid * per : total;
    int end = begin + per < total ? begin + per : total;
    if (GROUP_ID == 0) {
        int s = 0;
        for (int i = begin; i < end; i++) {
            s += counts[i];
        }
        part[lid] = s;
    }
    BARRIER();
    if (GROUP_ID == 0 && lid == 0) {
        int run = 0;
        for (int t = 0; t < gsize; t++) {
            int s = part[t];
            part[t] = run;
            run += s;
        }
    }
    BARRIER();
    if (GROUP_ID == 0) {
        int run = part[lid];
        for (int i = begin; i < end; i++) {
            int c = counts[i];
            counts[i] = run;
            run += c;
        }
    }
}

/* Stable scatter: chunk k walks its keys in order and places each at its digit's next
 * slot (offsets from radix_scan, advanced in place; each chunk owns its column). */
KERNEL void radix_scatter(GLOBAL int* keys_out ARG(0), GLOBAL int* pos_out ARG(1),
                          GLOBAL const int* keys ARG(2), GLOBAL const int* pos ARG(3),
                          GLOBAL int* offsets ARG(4), GLOBAL const int* P ARG(5) THREAD_ARGS) {
    int n = P[0];
    int K = P[3];
    int S = P[4];
    int shift = P[5];
    for (int k = GID; k < K; k += GLOBAL_SIZE) {
        int end = (k + 1) * S < n ? (k + 1) * S : n;
        for (int i = k * S; i < end; i++) {
            int key = keys[i];
            int slot = ((key >> shift) & (RADIX_BINS - 1)) * K + k;
            int dst = offsets[slot];
            offsets[slot] = dst + 1;
            keys_out[dst] = key;
            pos_out[dst] = pos[i];
        }
    }
}

/* starts[v] = the first sorted slot whose key is >= v, for v in [0, V]. */
KERNEL void embedding_segments(GLOBAL int* starts ARG(0), GLOBAL const int* keys ARG(1),
                               GLOBAL const int* P ARG(2) THREAD_ARGS) {
    int n = P[0];
    int V = P[2];
    for (int v = GID; v <= V; v += GLOBAL_SIZE) {
        int lo = 0;
        int hi = n;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (keys[mid] < v) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        starts[v] = lo;
    }
}

/* dtable[v, c] = sum of dy[pos[k], c] for k in [starts[v], starts[v + 1]), k increasing. */
KERNEL void embedding_backward_rows(GLOBAL T* dtable ARG(0), GLOBAL const T* dy ARG(1),
                                    GLOBAL const int* pos ARG(2), GLOBAL const int* starts ARG(3),
                                    GLOBAL const int* P ARG(4) THREAD_ARGS) {
    int C = P[1];
    int V = P[2];
    long total = (long)V * C;
    for (long t = GID; t < total; t += GLOBAL_SIZE) {
        int v = (int)(t / C);
        long c = t - (long)v * C;
        int k1 = starts[v + 1];
        BlockSum acc = bsum_init((T)0.0);
        for (int k = starts[v]; k < k1; k++) {
            acc = bsum_add(acc, dy[(long)pos[k] * C + c]);
        }
        dtable[t] = bsum_total(acc);
    }
}
