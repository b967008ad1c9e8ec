/* AdamW, in place on param, m, v (decoupled weight decay, bias-corrected).
 * P: [0] n. F: [0] lr, [1] beta1, [2] beta2, [3] eps, [4] weight_decay,
 *    [5] 1 - beta1^step, [6] 1 - beta2^step (computed on the host in float64).
 * Buffers: param, grad, m, v, P, F.
 */

KERNEL void adamw_update(GLOBAL T* param ARG(0), GLOBAL const T* grad ARG(1),
                         GLOBAL T* m ARG(2), GLOBAL T* v ARG(3),
                         GLOBAL const int* P ARG(4), GLOBAL const T* F ARG(5) THREAD_ARGS) {
    const int n = P[0];
    const T lr = F[0];
    const T b1 = F[1];
    const T b2 = F[2];
    const T eps = F[3];
    const T wd = F[4];
    const T bc1 = F[5];
    const T bc2 = F[6];
    const int i = GID; if (i < n) {
        const T g = grad[i];
        const T mi = b1 * m[i] + ((T)1 - b1) * g;
        const T vi = b2 * v[i] + ((T)1 - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        const T p = param[i];
        param[i] = p - lr * ((mi / bc1) / (PRECISE_SQRT(vi / bc2) + eps) + wd * p);
    }
}
