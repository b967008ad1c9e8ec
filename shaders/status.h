/* The device status buffer of index-taking kernels (see prelude.h, "Device status word").
 *
 * A kernel that meets an id outside its valid range never uses it to address memory: it
 * clamps (the row reads as zeros or contributes nothing) and records the event here. The
 * host (core/kernel_host/status.py) reads word 0 at the next sync point and, when it is not
 * zero, the rest, then raises the DomainError the CPU backend raises before dispatch.
 *
 * Each flagged launch also gets a slot (0 .. RIFTCO_STATUS_SLOTS - 1, the last int of its
 * P) that the host ties to the launch's bound (V), so the error names the call's bound
 * even when several tables (token and position embeddings) ran since the last sync.
 * Layout (int32 words; the host resets it to this state), with k = op * SLOTS + slot:
 *   [0]          bit (1 << k) set when op saw a bad id in slot k     (initially 0)
 *   [1 + 2 * k]  smallest bad id seen there, saturated to int32     (initially INT_MAX)
 *   [2 + 2 * k]  largest bad id seen there, saturated to int32      (initially INT_MIN)
 * Integer atomics (or, min, max) make the record the same whatever the thread order.
 * The op numbers and SLOTS are mirrored in core/kernel_host/status.py.
 */
#ifndef RIFTCO_STATUS_H
#define RIFTCO_STATUS_H

#define RIFTCO_OP_EMBEDDING 0
#define RIFTCO_OP_EMBEDDING_BACKWARD 1
#define RIFTCO_OP_CROSS_ENTROPY 2
#define RIFTCO_OP_CROSS_ENTROPY_BACKWARD 3
#define RIFTCO_STATUS_SLOTS 4

/* Record a bad id for op in slot. Call only on the (rare) bad path: three atomics. */
INLINE void riftco_flag_index(GLOBAL STATUS_T* status, int op, int slot, IDX value) {
    int v = value > (IDX)2147483647 ? 2147483647
            : value < (IDX)(-2147483647 - 1) ? (-2147483647 - 1) : (int)value;
    int k = op * RIFTCO_STATUS_SLOTS + slot;
    RIFTCO_STATUS_OR(status, 1 << k);
    RIFTCO_STATUS_MIN(status + 1 + 2 * k, v);
    RIFTCO_STATUS_MAX(status + 2 + 2 * k, v);
}

#endif /* RIFTCO_STATUS_H */
