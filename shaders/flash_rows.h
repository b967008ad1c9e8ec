/* Where the flash kernels find one head's rows (shaders/flash_attention.cl and its CPU
 * twin flash_attention_cpu.cl read the same integer parameters P). The layout is the
 * host's FlashRows (core/kernel_host/shader_defines.py), which defines the index of each
 * field in P as FLASH_P_<FIELD>: H, heads per batch index (FLASH_P_HEADS); the batch,
 * head and row strides of q, k, v and of dq, dk, dv (FLASH_P_BATCH_STRIDE and the two
 * after it); the offsets of q, k, v (FLASH_P_Q_OFFSET, _K_, _V_); the strides of out and
 * dout (FLASH_P_OUT_BATCH_STRIDE and the two after it) and their offset.
 * Row i of head bh = b * H + h starts at off + b * sb + h * sh + i * st. Dense
 * [BH, T, D] is H = 1, (T D, 0, D); attention_qkv passes head blocks of the fused
 * projection (H, T 3C, D, 3C; offsets 0, C, 2C) and of its [B, T, C] output.
 */

#ifndef RIFTCO_FLASH_ROWS_H
#define RIFTCO_FLASH_ROWS_H

/* Row i of one head starts at base + i * ld. */
typedef struct {
    long base;
    long ld;
} FaRows;

/* Head bh's rows in the layout whose batch, head and row strides start at P[at]
 * (FLASH_P_BATCH_STRIDE: q, k, v and their gradients; FLASH_P_OUT_BATCH_STRIDE: out and
 * dout), at element offset off. */
INLINE FaRows fa_rows(GLOBAL const int* P, int at, int off, int bh) {
    FaRows r;
    r.base = riftco_batch_offset(bh, P[FLASH_P_HEADS], P[at], P[at + 1], off);
    r.ld = P[at + 2];
    return r;
}

/* Head bh's rows of q, k, v (and of dq, dk, dv, which share their strides and offsets). */
INLINE FaRows fa_q_rows(GLOBAL const int* P, int bh) {
    return fa_rows(P, FLASH_P_BATCH_STRIDE, P[FLASH_P_Q_OFFSET], bh);
}
INLINE FaRows fa_k_rows(GLOBAL const int* P, int bh) {
    return fa_rows(P, FLASH_P_BATCH_STRIDE, P[FLASH_P_K_OFFSET], bh);
}
INLINE FaRows fa_v_rows(GLOBAL const int* P, int bh) {
    return fa_rows(P, FLASH_P_BATCH_STRIDE, P[FLASH_P_V_OFFSET], bh);
}
/* Head bh's rows of out and dout. */
INLINE FaRows fa_out_rows(GLOBAL const int* P, int bh) {
    return fa_rows(P, FLASH_P_OUT_BATCH_STRIDE, P[FLASH_P_OUT_OFFSET], bh);
}

/* One block of a head's rows, as every flash kernel walks them: head bh, first row r0,
 * where the head's T entries of lse and drow start (rbase = bh * T), and the head's rows
 * of q, k, v (and of their gradients) and of out, dout. Block blk of the BH * nb blocks of
 * `rows` rows (nb = ceil(T / rows)); the tiled and the CPU kernels share it so that both
 * cut the grid the same way. */
typedef struct {
    int bh;
    int r0;
    long rbase;
    FaRows q, k, v, o;
} FaBlock;

INLINE FaBlock fa_block(GLOBAL const int* P, int blk, int nb, int rows) {
    FaBlock b;
    b.bh = blk / nb;
    b.r0 = (blk - b.bh * nb) * rows;
    b.rbase = (long)b.bh * P[1];
    b.q = fa_q_rows(P, b.bh);
    b.k = fa_k_rows(P, b.bh);
    b.v = fa_v_rows(P, b.bh);
    b.o = fa_out_rows(P, b.bh);
    return b;
}

/* The scalar parameters every flash kernel starts from, as locals: BH, Tn, D, causal (from
 * the kernel's P) and scale (from its F). D is the caller's expression of P[2]: the tiled
 * kernels take it as it is, the CPU ones clamp it so their private row arrays stay in
 * bounds for the compiler. A macro, not a struct, so each stays a plain local. */
#define FA_SCALARS(P, F, D_OF_P) \
    int BH = (P)[0];             \
    int Tn = (P)[1];             \
    int D = D_OF_P;              \
    int causal = (P)[3];         \
    T scale = (F)[0]

#endif /* RIFTCO_FLASH_ROWS_H */
