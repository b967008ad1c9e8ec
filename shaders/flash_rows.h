/* Where the flash kernels find one head's rows (shaders/flash_attention.cl and its CPU
 * twin flash_attention_cpu.cl read the same integer parameters P):
 *   P[4] H, heads per batch index; [5..7] batch, head and row strides of q, k, v and of
 *   dq, dk, dv; [8..10] the offsets of q, k, v; [11..13] the strides of out and dout;
 *   [14] their offset.
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

/* Head bh's rows in the layout whose strides start at P[at] (5: q, k, v and their
 * gradients; 11: out and dout), at element offset off. */
INLINE FaRows fa_rows(GLOBAL const int* P, int at, int off, int bh) {
    FaRows r;
    r.base = riftco_batch_offset(bh, P[4], P[at], P[at + 1], off);
    r.ld = P[at + 2];
    return r;
}

#endif /* RIFTCO_FLASH_ROWS_H */
