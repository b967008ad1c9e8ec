/* AdamW, in place on param, m, v (decoupled weight decay, bias-corrected).
 * F (both kernels): [0] lr, [1] beta1, [2] beta2, [3] eps, [4] weight_decay,
 *    [5] 1 - beta1^step, [6] 1 - beta2^step; adamw_update then [7] 1 - beta1, [8] 1 - beta2;
 *    adamw_multi then [7] max_norm, [8] the clip epsilon 1e-6, [9] 1 - beta1, [10] 1 - beta2.
 *    Every 1 - x is computed on the host in float64: 1 - beta2 made here from beta2 rounded
 *    to float (1 - 0.999f = 9.99987e-4) would not match the correction, and each step was
 *    6.4e-6 too large (issue 31).
 * Both kernels update an element with adam_element; its gradient is grad * s, where s is 1
 * (exact: x * 1 is x) or the clip scale, so clipping inside gives the bits of a separate
 * scaling pass.
 */

INLINE void adam_element(GLOBAL T* param, GLOBAL const T* grad, GLOBAL T* m, GLOBAL T* v,
                         int i, T s, GLOBAL const T* F, T omb1, T omb2) {
    const T lr = F[0];
    const T b1 = F[1];
    const T b2 = F[2];
    const T eps = F[3];
    const T wd = F[4];
    const T bc1 = F[5];
    const T bc2 = F[6];
    const T g = grad[i] * s;
    const T mi = b1 * m[i] + omb1 * g;
    const T vi = b2 * v[i] + omb2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const T p = param[i];
    param[i] = p - lr * ((mi / bc1) / (PRECISE_SQRT(vi / bc2) + eps) + wd * p);
}

/* One tensor. P: [0] n. Buffers: param, grad, m, v, status, P, F. status is the device
 * status buffer (status.h): when an earlier kernel of the queue flagged a bad id (word 0
 * non-zero), the step writes nothing; the host raises the DomainError at its next sync. */
KERNEL void adamw_update(GLOBAL T* param ARG(0), GLOBAL const T* grad ARG(1),
                         GLOBAL T* m ARG(2), GLOBAL T* v ARG(3), GLOBAL const int* status ARG(4),
                         GLOBAL const int* P ARG(5), GLOBAL const T* F ARG(6) THREAD_ARGS) {
    const int i = GID;
    if (i < P[0] && status[0] == 0) {
        adam_element(param, grad, m, v, i, (T)1, F, F[7], F[8]);
    }
}

/* Up to ADAM_SEGMENTS tensors per launch, their elements one after another in thread
 * order (op unit riftco.ops.fused.adam_multi; plan in core/kernel_host/fused_adam_multi.py).
 * P: [0 .. ADAM_SEGMENTS) the tensors' sizes (0 for an unused segment), [ADAM_SEGMENTS]
 * 1 to clip. Buffers: (param, grad, m, v) per segment, norm (0-d), status (as in
 * adamw_update: nothing is written once a bad id was flagged), P, F.
 * The clip scale max_norm / maximum(norm + 1e-6, max_norm) is read from the device, so the
 * host never waits for the norm; NaN and +inf are decided on the loaded norm's bits (fast
 * math may assume a computed value finite): NaN writes NaN everywhere, as NaN * g would,
 * and +inf scales by 0, as max_norm / inf does. */
#if ADAM_SEGMENTS != 6
#error "adamw_multi binds six (param, grad, m, v) segments: update its signature"
#endif
#define ADAM_SEGMENT(k)                                                                  \
    if (i < P[k]) {                                                                      \
        if (poison) {                                                                    \
            param##k[i] = RIFTCO_NAN;                                                    \
            m##k[i] = RIFTCO_NAN;                                                        \
            v##k[i] = RIFTCO_NAN;                                                        \
        } else {                                                                         \
            adam_element(param##k, grad##k, m##k, v##k, i, s, F, F[9], F[10]);           \
        }                                                                                \
        return;                                                                          \
    }                                                                                    \
    i -= P[k];

KERNEL void adamw_multi(
    GLOBAL T* param0 ARG(0), GLOBAL const T* grad0 ARG(1), GLOBAL T* m0 ARG(2), GLOBAL T* v0 ARG(3),
    GLOBAL T* param1 ARG(4), GLOBAL const T* grad1 ARG(5), GLOBAL T* m1 ARG(6), GLOBAL T* v1 ARG(7),
    GLOBAL T* param2 ARG(8), GLOBAL const T* grad2 ARG(9), GLOBAL T* m2 ARG(10), GLOBAL T* v2 ARG(11),
    GLOBAL T* param3 ARG(12), GLOBAL const T* grad3 ARG(13), GLOBAL T* m3 ARG(14),
    GLOBAL T* v3 ARG(15),
    GLOBAL T* param4 ARG(16), GLOBAL const T* grad4 ARG(17), GLOBAL T* m4 ARG(18),
    GLOBAL T* v4 ARG(19),
    GLOBAL T* param5 ARG(20), GLOBAL const T* grad5 ARG(21), GLOBAL T* m5 ARG(22),
    GLOBAL T* v5 ARG(23),
    GLOBAL const T* norm ARG(24), GLOBAL const int* status ARG(25), GLOBAL const int* P ARG(26),
    GLOBAL const T* F ARG(27) THREAD_ARGS) {
    int i = GID;
    if (status[0] != 0) {
        return;
    }
    T s = (T)1;
    int poison = 0;
    if (P[ADAM_SEGMENTS]) {
        const T n = norm[0];
        const T limit = F[7];
        const T d = n + F[8];
        poison = RIFTCO_ISNAN(n);
        s = RIFTCO_ISPOSINF(n) ? (T)0 : limit / (d > limit ? d : limit);
    }
    ADAM_SEGMENT(0)
    ADAM_SEGMENT(1)
    ADAM_SEGMENT(2)
    ADAM_SEGMENT(3)
    ADAM_SEGMENT(4)
    ADAM_SEGMENT(5)
}
