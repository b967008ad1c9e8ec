/* Layout kernels: fill, strided gather into a dense tensor, column-block copies.
 * T may be any element type (float, double, int, long, and ushort for the 2-byte floats
 * float16 / bfloat16): these kernels only move data, so a half moves as its 16 bits.
 */

/* P: [0] n, [1] the value's bits (a 2-byte float, rounded once by the host). Buffers:
 * out, P. */
KERNEL void fill_bits(GLOBAL T* out ARG(0), GLOBAL const int* P ARG(1) THREAD_ARGS) {
    const int n = P[0];
    const T value = (T)P[1];
    const int i = GID; if (i < n) {
        out[i] = value;
    }
}

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

/* copy_strided for CPU devices (PoCL): the same P layout with ndim == 4 (the host pads
 * collapsed views with size-1 dims in front). Each thread copies a run of up to CR_RUN
 * elements of one innermost row, so the index arithmetic (two divisions per dim) is paid
 * per run instead of per element and the inner loop vectorises (a gather when the
 * innermost stride is not 1). Runs per thread are contiguous writes: right for caches,
 * wrong for GPU coalescing, which keeps copy_strided. */
#define CR_RUN 64

KERNEL void copy_strided_rows(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),
                              GLOBAL const int* P ARG(2) THREAD_ARGS) {
    const int d1 = P[4], d2 = P[5], d3 = P[6];
    const int s0 = P[7], s1 = P[8], s2 = P[9], s3 = P[10];
    const int rows = P[3] * d1 * d2;
    const int runs = (d3 + CR_RUN - 1) / CR_RUN;
    const int total = rows * runs;
    for (int t = GID; t < total; t += GLOBAL_SIZE) {
        const int row = t / runs;
        const int j0 = (t - row * runs) * CR_RUN;
        const int j1 = j0 + CR_RUN < d3 ? j0 + CR_RUN : d3;
        const int i2 = row % d2;
        const int i1 = (row / d2) % d1;
        const int i0 = row / (d2 * d1);
        GLOBAL const T* src = x + P[2] + i0 * s0 + i1 * s1 + i2 * s2;
        GLOBAL T* dst = out + (long)row * d3;
        for (int j = j0; j < j1; ++j) {
            dst[j] = src[j * s3];
        }
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
