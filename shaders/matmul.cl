/* Batched matmul C[b] = A[b] @ B[b] with every operand addressed through strides, so
 * transposes and views cost nothing. Batch index b splits into an outer and an inner index
 * (o = b / inner, i = b % inner: the (batch, head) pair of attention), each with its own
 * stride, plus an element offset:
 *   A[m, k] = a[aoff + o * sab + i * sai + m * sam + k * sak]
 *   B[k, n] = b[boff + o * sbb + i * sbi + k * sbk + n * sbn]
 *   C[m, n] = c[coff + o * scb + i * sci + m * scm + n]
 * A dense product has inner = 1 and C dense [batch, M, N]; attention read straight from a
 * fused q | k | v projection passes column blocks of it and writes into one (see
 * core/kernel_host/fused_attention_qkv.py).
 * P: [0] M, [1] N, [2] K, [3] batch, [4] sab, [5] sam, [6] sak, [7] sbb, [8] sbk, [9] sbn,
 *    [10] inner, [11] sai, [12] aoff, [13] sbi, [14] boff, [15] scb, [16] sci, [17] scm,
 *    [18] coff.
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
        GLOBAL const T* ab = a + riftco_batch_offset(bi, P[10], sab, P[11], P[12]);
        GLOBAL const T* bb = b + riftco_batch_offset(bi, P[10], sbb, P[13], P[14]);
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
                GLOBAL T* cb = c + riftco_batch_offset(bi, P[10], P[15], P[16], P[18]);
                const int scm = P[17];
                for (int i = 0; i < MM_W; ++i) {
                    const int gm = m0 + tm + i;
                    if (gm >= M) break;
                    for (int j = 0; j < MM_W; ++j) {
                        const int gn = n0 + tn + j;
                        if (gn < N) cb[(long)gm * scm + gn] = acc[i][j];
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
        GLOBAL const T* ab = a + riftco_batch_offset(bi, P[10], sab, P[11], P[12]) + (long)m0 * sam;
        GLOBAL const T* bb = b + riftco_batch_offset(bi, P[10], sbb, P[13], P[14]) + n0;
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
        const int scm = P[17];
        GLOBAL T* cb = c + riftco_batch_offset(bi, P[10], P[15], P[16], P[18]) + (long)m0 * scm + n0;
        UNROLL for (int i = 0; i < MP_WM; ++i) {
            if (m0 + i < M) {
                UNROLL for (int j = 0; j < MP_WN; ++j) {
                    if (n0 + j < N) cb[(long)i * scm + j] = acc[i][j];
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
        GLOBAL const T* ar = a + riftco_batch_offset(bi, P[10], sab, P[11], P[12]) + (long)m * sam;
        GLOBAL const T* bc = b + riftco_batch_offset(bi, P[10], sbb, P[13], P[14]) + (long)n * sbn;
        T acc = (T)0;
        for (int k = 0; k < K; ++k) acc += ar[(long)k * sak] * bc[(long)k * sbk];
        c[riftco_batch_offset(bi, P[10], P[15], P[16], P[18]) + (long)m * P[17] + n] = acc;
    }
}


/* matmul_wide: the GPU kernel for large products (the host picks it on runtimes that ask
 * for it, CUDA: many multiprocessors, registers to spare). A group computes 128x128 tiles
 * of C; each of its 256 slots owns an 8x8 register block split into four 4x4 quarters
 * (rows ty*4 + i and 64 + ty*4 + i, columns tx*4 + j and 64 + tx*4 + j, ty = slot / 16,
 * tx = slot % 16), so a warp's threadgroup reads are 16-byte runs that do not collide.
 * K advances MW_TK at a time through two threadgroup buffers: the next slice is fetched
 * into registers before the current one is multiplied and stored after it, so the global
 * loads are in flight during the arithmetic, with one barrier per slice. Rows of the
 * staged slices are padded by 4 elements, so the transposed-operand stores (consecutive
 * threads walking k) land in different banks.
 * Any group size works: slots are covered in ceil(256 / G) passes, and a group smaller
 * than 256 stages the elements past its MW_LOADS registers directly. 256 is the fast case.
 * Shared memory: 2 x 2 x MW_TK x 132 elements (16.5 KiB in float, 33 KiB in double). */
#define MW_TM 128
#define MW_TN 128
#define MW_TK 8
#define MW_LD (MW_TM + 4)
#define MW_SLOTS 256
#define MW_LOADS 4
#define MW_ELEMS (MW_TK * MW_TM)

/* Element e of the A slice (MW_TM x MW_TK) at k0: walk k fastest when A is contiguous in k. */
#define MW_A_COORD(e, mm, kk)                                                        \
    if (sak == 1) { kk = (e) % MW_TK; mm = (e) / MW_TK; }                            \
    else { kk = (e) / MW_TM; mm = (e) % MW_TM; }
#define MW_B_COORD(e, kk, nn)                                                        \
    if (sbn == 1) { kk = (e) / MW_TN; nn = (e) % MW_TN; }                            \
    else { kk = (e) % MW_TK; nn = (e) / MW_TK; }

KERNEL void matmul_wide(GLOBAL T* c ARG(0), GLOBAL const T* a ARG(1), GLOBAL const T* b ARG(2),
                        GLOBAL const int* P ARG(3) THREAD_ARGS) {
    LOCAL T As[2 * MW_TK * MW_LD]; /* As[buf][k][m] */
    LOCAL T Bs[2 * MW_TK * MW_LD]; /* Bs[buf][k][n] */
    const int M = P[0], N = P[1], K = P[2], batch = P[3];
    const int sab = P[4], sam = P[5], sak = P[6], sbb = P[7], sbk = P[8], sbn = P[9];
    const int lid = LID;
    const int gsize = GROUP_SIZE;
    const int tiles_m = (M + MW_TM - 1) / MW_TM;
    const int tiles_n = (N + MW_TN - 1) / MW_TN;
    const int ntiles = batch * tiles_m * tiles_n;
    const int steps = (K + MW_TK - 1) / MW_TK;
    for (int tile = GROUP_ID; tile < ntiles; tile += NUM_GROUPS) {
        const int bi = tile / (tiles_m * tiles_n);
        const int rem = tile - bi * tiles_m * tiles_n;
        const int m0 = (rem / tiles_n) * MW_TM;
        const int n0 = (rem % tiles_n) * MW_TN;
        GLOBAL const T* ab = a + riftco_batch_offset(bi, P[10], sab, P[11], P[12]);
        GLOBAL const T* bb = b + riftco_batch_offset(bi, P[10], sbb, P[13], P[14]);
        for (int pass = 0; pass * gsize < MW_SLOTS; ++pass) {
            const int slot = pass * gsize + lid;
            const bool active = slot < MW_SLOTS;
            const int ty = (active ? slot : 0) / 16;
            const int tx = (active ? slot : 0) % 16;
            T acc[8][8];
            UNROLL for (int i = 0; i < 8; ++i) {
                UNROLL for (int j = 0; j < 8; ++j) acc[i][j] = (T)0;
            }
            T ra[MW_LOADS];
            T rb[MW_LOADS];
            /* Registers <- slice `step` (the first MW_LOADS * gsize elements of each). */
            for (int step = -1; step < steps; ++step) {
                const int next = step + 1;
                if (next < steps) {
                    const int k0 = next * MW_TK;
                    UNROLL for (int r = 0; r < MW_LOADS; ++r) {
                        const int e = lid + r * gsize;
                        int mm, kk, nn, kb;
                        MW_A_COORD(e, mm, kk)
                        MW_B_COORD(e, kb, nn)
                        const int gm = m0 + mm, gk = k0 + kk, gkb = k0 + kb, gn = n0 + nn;
                        ra[r] = (e < MW_ELEMS && gm < M && gk < K)
                                    ? ab[(long)gm * sam + (long)gk * sak] : (T)0;
                        rb[r] = (e < MW_ELEMS && gkb < K && gn < N)
                                    ? bb[(long)gkb * sbk + (long)gn * sbn] : (T)0;
                    }
                }
                if (step >= 0 && active) {
                    const int cur = (step & 1) * MW_TK * MW_LD;
                    UNROLL for (int kk = 0; kk < MW_TK; ++kk) {
                        T av[8];
                        T bv[8];
                        const int ra0 = cur + kk * MW_LD + ty * 4;
                        const int rb0 = cur + kk * MW_LD + tx * 4;
                        UNROLL for (int i = 0; i < 4; ++i) {
                            av[i] = As[ra0 + i];
                            av[4 + i] = As[ra0 + 64 + i];
                            bv[i] = Bs[rb0 + i];
                            bv[4 + i] = Bs[rb0 + 64 + i];
                        }
                        UNROLL for (int i = 0; i < 8; ++i) {
                            UNROLL for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
                        }
                    }
                }
                if (next < steps) {
                    const int nb = (next & 1) * MW_TK * MW_LD;
                    UNROLL for (int r = 0; r < MW_LOADS; ++r) {
                        const int e = lid + r * gsize;
                        if (e < MW_ELEMS) {
                            int mm, kk, nn, kb;
                            MW_A_COORD(e, mm, kk)
                            MW_B_COORD(e, kb, nn)
                            As[nb + kk * MW_LD + mm] = ra[r];
                            Bs[nb + kb * MW_LD + nn] = rb[r];
                        }
                    }
                    /* Small groups: the rest of the slice straight from global memory. */
                    const int k0 = next * MW_TK;
                    for (int e = lid + MW_LOADS * gsize; e < MW_ELEMS; e += gsize) {
                        int mm, kk, nn, kb;
                        MW_A_COORD(e, mm, kk)
                        MW_B_COORD(e, kb, nn)
                        const int gm = m0 + mm, gk = k0 + kk, gkb = k0 + kb, gn = n0 + nn;
                        As[nb + kk * MW_LD + mm] =
                            (gm < M && gk < K) ? ab[(long)gm * sam + (long)gk * sak] : (T)0;
                        Bs[nb + kb * MW_LD + nn] =
                            (gkb < K && gn < N) ? bb[(long)gkb * sbk + (long)gn * sbn] : (T)0;
                    }
                }
                BARRIER();
            }
            if (active) {
                GLOBAL T* cb = c + riftco_batch_offset(bi, P[10], P[15], P[16], P[18]);
                const int scm = P[17];
                UNROLL for (int i = 0; i < 8; ++i) {
                    const int gm = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
                    if (gm < M) {
                        UNROLL for (int j = 0; j < 8; ++j) {
                            const int gn = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
                            if (gn < N) cb[(long)gm * scm + gn] = acc[i][j];
                        }
                    }
                }
            }
        }
    }
}
