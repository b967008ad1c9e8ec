/* Layout kernels: fill, strided gather into a dense tensor, column-block copies.
 * T may be any element type (float, double, int, long): these kernels only move data.
 */

/* P: [0] n. F: [0] value. Buffers: out, P, F. */
KERNEL void fill_value(GLOBAL T* out ARG(0), GLOBAL const int* P ARG(1),
                       GLOBAL const T* F ARG(2) THREAD_ARGS) {
    const int n = P[0];
    const T value = F[0];
    const int i = GID; if (i < n) {
        out[i] = value;
    }
}

/* Dense out[i] = x[offset + sum_d coord_d(i) * stride_d] for a view of rank <= 8.
 * P: [0] n, [1] ndim, [2] offset, [3 .. 3+ndim) shape, [3+ndim .. 3+2 ndim) strides.
 * Strides may be 0 (broadcast) or permuted. Buffers: out, x, P. */
KERNEL void copy_strided(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),
                         GLOBAL const int* P ARG(2) THREAD_ARGS) {
    const int n = P[0];
    const int nd = P[1];
    const int offset = P[2];
    const int i = GID; if (i < n) {
        int rem = i;
        int src = offset;
        for (int d = nd - 1; d >= 0; --d) {
            const int size = P[3 + d];
            src += (rem % size) * P[3 + nd + d];
            rem /= size;
        }
        out[i] = x[src];
    }
}

/* A block of columns between two row-major matrices (concatenate / split on the last
 * axis): out[r * dst_stride + dst_off + c] = x[r * src_stride + src_off + c], c < width.
 * P: [0] rows, [1] width, [2] src_stride, [3] src_off, [4] dst_stride, [5] dst_off. */
KERNEL void copy_cols(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),
                      GLOBAL const int* P ARG(2) THREAD_ARGS) {
    const int rows = P[0];
    const int width = P[1];
    const int n = rows * width;
    const int i = GID; if (i < n) {
        const int r = i / width;
        const int c = i - r * width;
        out[r * P[4] + P[5] + c] = x[r * P[2] + P[3] + c];
    }
}
