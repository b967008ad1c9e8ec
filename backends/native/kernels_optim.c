/* AdamW for one dtype (included by kernels.c with T and F(name)): one tensor
 * (adam_update) or many in one parallel pass with the global-norm clip scale applied
 * inside (adam_update_multi, op unit riftco.ops.fused.adam_multi).
 *
 * Both run the same chunk worker, whose gradient is g * s: s = 1 for adam_update (exact:
 * x * 1 is x for every float), the clip scale for adam_update_multi, so the multi-tensor
 * step gives the bits of clip_grad_norm's scaling pass followed by adam_update. Every
 * element is written by one thread; nothing depends on the thread count.
 */

/* 1 - b1 and 1 - b2 come in computed in double: made in T from b2 rounded to float,
 * 1 - 0.999f is 9.99987e-4, which the double bias correction does not match. */
RIFT_CLONES static void F(adam_chunk)(T *p, const T *g, T *m, T *v, int64_t n, T s, T lr,
                                      T b1, T b2, T eps, T wd, T bc1, T bc2, T omb1, T omb2) {
    RIFT_SIMD
    for (int64_t i = 0; i < n; i++) {
        T gi = g[i] * s;
        T mi = b1 * m[i] + omb1 * gi;
        T vi = b2 * v[i] + omb2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        T upd = (mi / bc1) / (RIFT_SQRT(vi / bc2) + eps);
        p[i] = p[i] - lr * (upd + wd * p[i]);
    }
}

void F(adam_update)(T *p, const T *g, T *m, T *v, int64_t n, double lr, double b1, double b2,
                    double eps, double wd, double bc1, double bc2) {
    int64_t chunks = (n + RIFT_CHUNK - 1) / RIFT_CHUNK;
    RIFT_PRAGMA(omp parallel for schedule(static) if (n > RIFT_PAR_ROWS))
    for (int64_t c = 0; c < chunks; c++) {
        int64_t lo = c * RIFT_CHUNK, hi = lo + RIFT_CHUNK < n ? lo + RIFT_CHUNK : n;
        F(adam_chunk)(p + lo, g + lo, m + lo, v + lo, hi - lo, (T)1, (T)lr, (T)b1, (T)b2,
                      (T)eps, (T)wd, (T)bc1, (T)bc2, (T)(1.0 - b1), (T)(1.0 - b2));
    }
}

/* max_norm / maximum(norm + clip_eps, max_norm) in T, as the primitives add_scalar,
 * maximum (NaN propagating; max_norm is finite) and div compute it. */
static T F(clip_scale)(T norm, double max_norm, double clip_eps) {
    T limit = (T)max_norm;
    T d = norm + (T)clip_eps;
    return limit / ((isnan(d) || d > limit) ? d : limit);
}

/* Every tensor cut into RIFT_CHUNK-element chunks, all chunks of all tensors shared out
 * to the team in one parallel loop (one wake-up per step instead of one per parameter).
 * norm: NULL for no clipping; clip_eps: riftco.ops.fused.adam_multi.CLIP_EPS.
 * Returns -1 when the chunk table cannot be allocated. */
int F(adam_update_multi)(T **p, T **g, T **m, T **v, const int64_t *n, int64_t count,
                         double lr, double b1, double b2, double eps, double wd, double bc1,
                         double bc2, const T *norm, double max_norm, double clip_eps) {
    int64_t *first = (int64_t *)malloc(sizeof(int64_t) * (size_t)(count + 1));
    if (!first) return -1;
    int64_t total = 0;
    first[0] = 0;
    for (int64_t k = 0; k < count; k++) {
        first[k + 1] = first[k] + (n[k] + RIFT_CHUNK - 1) / RIFT_CHUNK;
        total += n[k];
    }
    const T s = norm ? F(clip_scale)(*norm, max_norm, clip_eps) : (T)1;
    RIFT_PRAGMA(omp parallel for schedule(static) if (total > RIFT_PAR_ROWS))
    for (int64_t c = 0; c < first[count]; c++) {
        int64_t lo_k = 0, hi_k = count; /* the last tensor whose first chunk is <= c */
        while (hi_k - lo_k > 1) {
            int64_t mid = (lo_k + hi_k) / 2;
            if (first[mid] <= c) lo_k = mid; else hi_k = mid;
        }
        int64_t k = lo_k, lo = (c - first[k]) * RIFT_CHUNK;
        int64_t hi = lo + RIFT_CHUNK < n[k] ? lo + RIFT_CHUNK : n[k];
        F(adam_chunk)(p[k] + lo, g[k] + lo, m[k] + lo, v[k] + lo, hi - lo, s, (T)lr, (T)b1,
                      (T)b2, (T)eps, (T)wd, (T)bc1, (T)bc2, (T)(1.0 - b1), (T)(1.0 - b2));
    }
    free(first);
    return 0;
}
