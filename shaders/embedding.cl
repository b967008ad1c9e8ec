/* Embedding gather and its deterministic scatter-add backward.
 *
 * Integer params P: [0] n (number of ids), [1] C (row width), [2] V (table rows).
 * ids have the host's index type IDX (int or long).
 * The backward runs one thread per (vocab row, column) and walks every id in order,
 * adding dy rows whose id matches: no atomics, and the same summation order (hence the
 * same bits) as a sequential scatter-add on every run. Neighbouring threads share a vocab
 * row, so the id test branches the same way across most of a group.
 */

KERNEL void embedding_forward(GLOBAL T* out ARG(0), GLOBAL const T* table ARG(1),
                              GLOBAL const IDX* ids ARG(2), GLOBAL const int* P ARG(3)
                              THREAD_ARGS) {
    int n = P[0];
    int C = P[1];
    long total = (long)n * C;
    for (long t = GID; t < total; t += GLOBAL_SIZE) {
        long i = t / C;
        long c = t - i * C;
        out[t] = table[(long)ids[i] * C + c];
    }
}

KERNEL void embedding_backward(GLOBAL T* dtable ARG(0), GLOBAL const T* dy ARG(1),
                               GLOBAL const IDX* ids ARG(2), GLOBAL const int* P ARG(3)
                               THREAD_ARGS) {
    int n = P[0];
    int C = P[1];
    int V = P[2];
    long total = (long)V * C;
    for (long t = GID; t < total; t += GLOBAL_SIZE) {
        long v = t / C;
        long c = t - v * C;
        T acc = (T)0.0;
        for (int i = 0; i < n; i++) {
            if ((long)ids[i] == v) {
                acc += dy[(long)i * C + c];
            }
        }
        dtable[t] = acc;
    }
}
