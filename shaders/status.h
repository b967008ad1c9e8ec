/* The device status buffer of index-taking kernels (see prelude.h, "Device status word").
 *
 * A kernel that meets an id outside its valid range never uses it to address memory: it
 * clamps (the row reads as zeros or contributes nothing) and records the event here. The
 * host (core/kernels/status.py) reads word 0 at the next sync point and, when it is not
 * zero, the rest, then raises the DomainError the CPU backend raises before dispatch.
 *
 * Layout (int32 words; the host resets it to this state):
 *   [0]            bit (1 << op) set when op saw a bad id          (initially 0)
 *   [1 + 2 * op]   smallest bad id op saw, saturated to int32     (initially INT_MAX)
 *   [2 + 2 * op]   largest bad id op saw, saturated to int32      (initially INT_MIN)
 * Integer atomics (or, min, max) make the record the same whatever the thread order.
 * The op numbers are mirrored in core/kernels/status.py (STATUS_OPS).
 */
#ifndef RIFTCO_STATUS_H
#define RIFTCO_STATUS_H

#define RIFTCO_OP_EMBEDDING 0
#define RIFTCO_OP_EMBEDDING_BACKWARD 1
#define RIFTCO_OP_CROSS_ENTROPY 2
#define RIFTCO_OP_CROSS_ENTROPY_BACKWARD 3

/* Record a bad id for op. Call only on the (rare) bad path: it costs three atomics. */
INLINE void riftco_flag_index(GLOBAL STATUS_T* status, int op, IDX value) {
    int v = value > (IDX)2147483647 ? 2147483647
            : value < (IDX)(-2147483647 - 1) ? (-2147483647 - 1) : (int)value;
    RIFTCO_STATUS_OR(status, 1 << op);
    RIFTCO_STATUS_MIN(status + 1 + 2 * op, v);
    RIFTCO_STATUS_MAX(status + 2 + 2 * op, v);
}

#endif /* RIFTCO_STATUS_H */
