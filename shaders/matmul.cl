/* Batched matmul C[b] = A[b] @ B[b] with A, B addressed through strides, so transposes
 * cost nothing: A[m, k] = a[b * sab + m * sam + k * sak], B[k, n] = b[b * sbb + k * sbk +
 * n * sbn]. C is dense [batch, M, N].
 * P: [0] M, [1] N, [2] K, [3] batch, [4] sab, [5] sam, [6] sak, [7] sbb, [8] sbk, [9] sbn.
 * Buffers: c, a, b, P.
 *
 * matmul_tiled: each threadgroup computes 64x64 tiles of C (grid-stride over tiles),
 * staging 64x16 slices of A and 16x64 of B in threadgroup memory (8 KiB in float, 16 KiB
 * in double). A tile is 256 micro-tiles of 4x4 outputs; a group of G threads covers them
 * in ceil(256 / G) passes, so any group size works (Metal's is unknown to the host).
 * Loads are ordered so that consecutive threads read consecutive addresses for either
 * transpose flag. The host launches 256 threads per tile.
 *
 * matmul_panel: for CPU devices (PoCL), where threadgroup memory is ordinary memory and a
 * barrier splits the kernel into per-region loops that spill every live register: no
 * threadgroup memory, no barrier. Each thread computes MP_WM x MP_WN outputs over the
 * whole of K (grid-stride over those micro-tiles, so any group size works), reading a
 * B row segment that must be contiguous (sbn == 1: the host packs a transposed B first)
 * and broadcasting A entries of any stride. The fixed-trip inner loops unroll, so the
 * accumulators stay in registers and the j loop vectorises (8 x 16 floats is 8 AVX-512
 * registers). Interior tiles take a branch-free path; edge tiles clamp their reads.
 * Too many registers per thread for a GPU: GPU devices keep matmul_tiled.
 */

#define MM_TM 64
#define MM_TN 64
#define MM_TK 16
#define MM_W 4
#define MM_MICRO ((MM_TM / MM_W) * (MM_TN / MM_W))

KERNEL void matmul_tiled(GLOBAL T* c ARG(0), GLOBAL const T* a ARG(1), GLOBAL const T* b ARG(2),
                         GLOBAL const int* P ARG(3) THREAD_ARGS) {
    LOCAL T As[MM_TK * MM_TM]; /* As[k * MM_TM + m] */
    LOCAL T Bs[MM_TK * MM_TN]; /* Bs[k * MM_TN + n] */
    const int M = P[0], N = P[1], K = P[2], batch = P[3];
    const int sab = P[4], sam = P[5], sak = P[6], sbb = P[7], sbk = P[8], sbn = P[9];
    const int lid = LID;
    const int gsize = GROUP_SIZE;
    const int tiles_m = (M + MM_TM - 1) / MM_TM;
    const int tiles_n = (N + MM_TN - 1) / MM_TN;
    const int ntiles = batch * tiles_m * tiles_n;
    for (int tile = GROUP_ID; tile < ntiles; tile += NUM_GROUPS) {
        const int bi = tile / (tiles_m * tiles_n);
        const int rem = tile - bi * tiles_m * tiles_n;
        const int m0 = (rem / tiles_n) * MM_TM;
        const int n0 = (rem % tiles_n) * MM_TN;
        GLOBAL const T* ab = a + bi * sab;
        GLOBAL const T* bb = b + bi * sbb;
        for (int pass = 0; pass * gsize < MM_MICRO; ++pass) {
            const int micro = pass * gsize + lid;
            const bool active = micro < MM_MICRO;
            const int tm = (micro / (MM_TN / MM_W)) * MM_W;
            const int tn = (micro % (MM_TN / MM_W)) * MM_W;
            T acc[MM_W][MM_W];
            for (int i = 0; i < MM_W; ++i)
                for (int j = 0; j < MM_W; ++j) acc[i][j] = (T)0;
            for (int k0 = 0; k0 < K; k0 += MM_TK) {
                for (int e = lid; e < MM_TK * MM_TM; e += gsize) {
                    int kk, mm;
                    if (sak == 1) { kk = e % MM_TK; mm = e / MM_TK; }
                    else { kk = e / MM_TM; mm = e % MM_TM; }
                    const int gm = m0 + mm, gk = k0 + kk;
                    As[kk * MM_TM + mm] = (gm < M && gk < K) ? ab[gm * sam + gk * sak] : (T)0;
                }
                for (int e = lid; e < MM_TK * MM_TN; e += gsize) {
                    int kk, nn;
                    if (sbn == 1) { kk = e / MM_TN; nn = e % MM_TN; }
                    else { kk = e % MM_TK; nn = e / MM_TK; }
                    const int gk = k0 + kk, gn = n0 + nn;
                    Bs[kk * MM_TN + nn] = (gk < K && gn < N) ? bb[gk * sbk + gn * sbn] : (T)0;
                }
                BARRIER();
                if (active) {
                    for (int kk = 0; kk < MM_TK; ++kk) {
                        T ar[MM_W];
                        T br[MM_W];
                        for (int i = 0; i < MM_W; ++i) ar[i] = As[kk * MM_TM + tm + i];
                        for (int j = 0; j < MM_W; ++j) br[j] = Bs[kk * MM_TN + tn + j];
                        for (int i = 0; i < MM_W; ++i)
                            for (int j = 0; j < MM_W; ++j) acc[i][j] += ar[i] * br[j];
                    }
                }
                BARRIER();
            }
            if (active) {
                GLOBAL T* cb = c + bi * M * N;
                for (int i = 0; i < MM_W; ++i) {
                    const int gm = m0 + tm + i;
                    if (gm >= M) break;
                    for (int j = 0; j < MM_W; ++j) {
                        const int gn = n0 + tn + j;
                        if (gn < N) cb[gm * N + gn] = acc[i][j];
                    }
                }
            }
        }
    }
}

#define MP_WM 8
#define MP_WN 16

KERNEL void matmul_panel(GLOBAL T* c ARG(0), GLOBAL const T* a ARG(1), GLOBAL const T* b ARG(2),
                         GLOBAL const int* P ARG(3) THREAD_ARGS) {
    const int M = P[0], N = P[1], K = P[2], batch = P[3];
    const int sab = P[4], sam = P[5], sak = P[6], sbb = P[7], sbk = P[8];
    const int mt = (M + MP_WM - 1) / MP_WM;
    const int nt = (N + MP_WN - 1) / MP_WN;
    const int total = batch * mt * nt;
    for (int t = GID; t < total; t += GLOBAL_SIZE) {
        const int bi = t / (mt * nt);
        const int rem = t - bi * mt * nt;
        const int m0 = (rem / nt) * MP_WM;
        const int n0 = (rem - (rem / nt) * nt) * MP_WN;
        GLOBAL const T* ab = a + (long)bi * sab + (long)m0 * sam;
        GLOBAL const T* bb = b + (long)bi * sbb + n0;
        T acc[MP_WM][MP_WN];
        UNROLL for (int i = 0; i < MP_WM; ++i) {
            UNROLL for (int j = 0; j < MP_WN; ++j) acc[i][j] = (T)0;
        }
        if (m0 + MP_WM <= M && n0 + MP_WN <= N) {
            for (int k = 0; k < K; ++k) {
                GLOBAL const T* brow = bb + (long)k * sbk;
                GLOBAL const T* acol = ab + (long)k * sak;
                T br[MP_WN];
                UNROLL for (int j = 0; j < MP_WN; ++j) br[j] = brow[j];
                UNROLL for (int i = 0; i < MP_WM; ++i) {
                    const T ai = acol[i * sam];
                    UNROLL for (int j = 0; j < MP_WN; ++j) acc[i][j] += ai * br[j];
                }
            }
        } else {
            const int mlast = M - 1 - m0;
            const int nlast = N - 1 - n0;
            for (int k = 0; k < K; ++k) {
                GLOBAL const T* brow = bb + (long)k * sbk;
                GLOBAL const T* acol = ab + (long)k * sak;
                T br[MP_WN];
                UNROLL for (int j = 0; j < MP_WN; ++j) br[j] = brow[j < nlast ? j : nlast];
                UNROLL for (int i = 0; i < MP_WM; ++i) {
                    const T ai = acol[(i < mlast ? i : mlast) * sam];
                    UNROLL for (int j = 0; j < MP_WN; ++j) acc[i][j] += ai * br[j];
                }
            }
        }
        GLOBAL T* cb = c + (long)bi * M * N + (long)m0 * N + n0;
        UNROLL for (int i = 0; i < MP_WM; ++i) {
            if (m0 + i < M) {
                UNROLL for (int j = 0; j < MP_WN; ++j) {
                    if (n0 + j < N) cb[i * N + j] = acc[i][j];
                }
            }
        }
    }
}

/* One thread per output: for thin products (M or N below 8) where tiles would idle. */
KERNEL void matmul_small(GLOBAL T* c ARG(0), GLOBAL const T* a ARG(1), GLOBAL const T* b ARG(2),
                         GLOBAL const int* P ARG(3) THREAD_ARGS) {
    const int M = P[0], N = P[1], K = P[2], batch = P[3];
    const int sab = P[4], sam = P[5], sak = P[6], sbb = P[7], sbk = P[8], sbn = P[9];
    const int total = batch * M * N;
    for (int t = GID; t < total; t += GLOBAL_SIZE) {
        const int bi = t / (M * N);
        const int rem = t - bi * M * N;
        const int m = rem / N;
        const int n = rem - m * N;
        GLOBAL const T* ar = a + bi * sab + m * sam;
        GLOBAL const T* bc = b + bi * sbb + n * sbn;
        T acc = (T)0;
        for (int k = 0; k < K; ++k) acc += ar[k * sak] * bc[k * sbk];
        c[t] = acc;
    }
}

