// windowed_sim.cuh: one individual's ordered plan, timed by an event loop, as
// __host__ __device__ code.
//
// Computes docs/model.md "Ordered plans", Timing and Memory, for ONE individual in integer
// ticks, exactly as tidgap/schedules/simulate.py does in floats:
//   forward k of s:  start = max(free_s, A[s-1][i]), i = the upstream microbatch holding
//                    its last sample (A[-1] = 0: stage 0 waits for nothing)
//                    EF[s][k] = start + Tf_s(f), A[s][k] = max(EF[s][k], A[s][k-1]) + Cf_s(f)
//   backward k of s: start = max(free_s, EF[s][i_own], A'[s+1][i]) (no A' on the last stage)
//                    EB[s][k] = start + Tb_s(c), A'[s][k] = max(EB[s][k], A'[s][k-1]) + Cb_{s-1}(c)
// sweeping the stages until none can run its next op, and returns
//   max_s (EB[s][N_s] + tail_s), and peak_held[s] = the most P[s][k] - Q[s][j] after a forward
// (units), or TIDGAP_INVALID (peak_held all 0) when the order breaks rule `count` or cannot
// finish (rules 1 or 2 broken: a deadlock). Arrays (row-major; int64 ticks, int32 sizes in
// units, int8 ops):
//   forward, backward (S, K)  sizes, zeros after each row's last
//   order             (S, L)  ops per stage: TIDGAP_FORWARD_OP, TIDGAP_BACKWARD_OP, then
//                             TIDGAP_NO_OP after the last (tidgap.optimize.genome's codes)
//   forward_compute, backward_compute (S, T); forward_transfer, backward_transfer (S-1, T),
//   backward_transfer[l] indexed by the sender's (stage l+1) size; tails (S,); T = U + 1
//   arrivals          (S (2 (K+1) + 1)) int64 scratch: A and A' per stage (K+1 each), then
//                     each stage's free time (the end of its last op)
//   sizes             (S (2 (K+1) + 5)) int32 scratch: P and Q per stage (K+1 each, in units),
//                     then each stage's TIDGAP_CURSORS cursors
// EF and EB are not kept: a stage's ops run one after another, so the end of its own
// forward is never after its free time, and its last op is its last backward (which needs
// the last forward), whose end is the free time the loop ends with.
// The same code is compiled by NVRTC for the GPU (windowed_evaluate.cu) and by the host
// compiler for tests (tests/support/native/windowed_host.cpp).
#ifndef TIDGAP_WINDOWED_SIM_CUH
#define TIDGAP_WINDOWED_SIM_CUH

#include "flush_chain.cuh"

// The op codes come as -D defines from tidgap.kernels.source.operation_defines().
#if !defined(TIDGAP_FORWARD_OP) || !defined(TIDGAP_BACKWARD_OP) || !defined(TIDGAP_NO_OP)
#error "compile with tidgap.kernels.source.operation_defines() (-DTIDGAP_FORWARD_OP=...)"
#endif

// An iteration time no valid plan reaches (2^61 - 1, tidgap.backends.evaluator.INVALID):
// what an order that cannot run scores.
#define TIDGAP_INVALID ((((tidgap_i64)1) << 61) - 1)  // numpy.iinfo(int64).max // 4
#define TIDGAP_NEVER (-(((tidgap_i64)1) << 62))

// min{i : prefix[i] >= sample} over prefix[0..count] (non-decreasing, prefix[count] = total).
__host__ __device__ inline int tidgap_holder(const int* prefix, int count, int sample) {
    int low = 0, high = count;
    while (low < high) {
        int middle = (low + high) / 2;
        if (prefix[middle] >= sample) high = middle; else low = middle + 1;
    }
    return low;
}

// Cursors per stage (5 ints): ops done, forwards done, backwards done, M_s, N_s.
#define TIDGAP_CURSORS 5

// int64 entries of `arrivals` and int32 entries of `sizes` for S stages of width K.
#define TIDGAP_ARRIVALS(stages, width) ((stages) * (2 * ((width) + 1) + 1))
#define TIDGAP_SIZES(stages, width) ((stages) * (2 * ((width) + 1) + TIDGAP_CURSORS))

__host__ __device__ inline tidgap_i64 tidgap_ordered_fitness(
    const int* forward, const int* backward, const signed char* order, int stages, int width,
    int length, const tidgap_i64* forward_compute, const tidgap_i64* backward_compute,
    const tidgap_i64* forward_transfer, const tidgap_i64* backward_transfer,
    const tidgap_i64* tails, int table_width, tidgap_i64* arrivals, int* sizes,
    tidgap_i64* peak_held) {
    const int row = width + 1;
    const int ops = length;
    tidgap_i64* free_at = arrivals + 2 * stages * row;
    int* cursors = sizes + 2 * stages * row;
#define TIDGAP_PREFIX(s, which) (sizes + (2 * (s) + (which)) * row)        // P Q
#define TIDGAP_ARRIVAL(s, which) (arrivals + (2 * (s) + (which)) * row)    // A A'
    for (int s = 0; s < stages; ++s) {
        int* P = TIDGAP_PREFIX(s, 0);
        int* Q = TIDGAP_PREFIX(s, 1);
        int m = 0, n = 0;
        P[0] = 0;
        Q[0] = 0;
        for (int k = 0; k < width; ++k) {
            int f = forward[s * width + k], c = backward[s * width + k];
            if (f > 0) { P[m + 1] = P[m] + f; ++m; }
            if (c > 0) { Q[n + 1] = Q[n] + c; ++n; }
        }
        int fs = 0, bs = 0, j = 0;
        for (; j < ops && order[s * ops + j] >= 0; ++j) {
            const signed char code = order[s * ops + j];
            if (code == TIDGAP_FORWARD_OP) ++fs; else if (code == TIDGAP_BACKWARD_OP) ++bs; else fs = -1;
        }
        for (; j < ops; ++j) {
            if (order[s * ops + j] != TIDGAP_NO_OP) fs = -1;  // an op after the padding
        }
        if (fs != m || bs != n) {  // rule count
            for (int t = 0; t < stages; ++t) peak_held[t] = 0;
            return TIDGAP_INVALID;
        }
        TIDGAP_ARRIVAL(s, 0)[0] = TIDGAP_NEVER;
        TIDGAP_ARRIVAL(s, 1)[0] = TIDGAP_NEVER;
        free_at[s] = 0;
        int* cursor = cursors + s * TIDGAP_CURSORS;
        cursor[0] = cursor[1] = cursor[2] = 0;
        cursor[3] = m;
        cursor[4] = n;
        peak_held[s] = 0;
    }
    int progressed = 1;
    while (progressed) {
        progressed = 0;
        for (int s = 0; s < stages; ++s) {
            const int* P = TIDGAP_PREFIX(s, 0);
            const int* Q = TIDGAP_PREFIX(s, 1);
            int* cursor = cursors + s * TIDGAP_CURSORS;
            const int length = cursor[3] + cursor[4];
            tidgap_i64 stage_free = free_at[s];
            while (cursor[0] < length) {
                const signed char op = order[s * ops + cursor[0]];
                const int nf = cursor[1], nb = cursor[2];
                tidgap_i64 start = stage_free;  // the stage is free when its previous op ends
                if (op == TIDGAP_FORWARD_OP) {
                    const int k = nf + 1;
                    if (s > 0) {
                        const int* up = cursors + (s - 1) * TIDGAP_CURSORS;
                        const int i = tidgap_holder(TIDGAP_PREFIX(s - 1, 0), up[3], P[k]);
                        if (i > up[1]) break;  // its activations are not sent yet
                        start = tidgap_max(start, TIDGAP_ARRIVAL(s - 1, 0)[i]);
                    }
                    const int size = forward[s * width + nf];
                    stage_free = start + forward_compute[s * table_width + size];
                    if (s < stages - 1) {
                        tidgap_i64* A = TIDGAP_ARRIVAL(s, 0);
                        A[k] = tidgap_max(stage_free, A[k - 1]) + forward_transfer[s * table_width + size];
                    }
                    peak_held[s] = tidgap_max(peak_held[s], (tidgap_i64)(P[k] - Q[nb]));
                    cursor[1] = k;
                } else {
                    const int k = nb + 1;
                    // its own forward has not run (once it has, it ended by `stage_free`)
                    if (tidgap_holder(P, cursor[3], Q[k]) > nf) break;
                    if (s < stages - 1) {
                        const int* down = cursors + (s + 1) * TIDGAP_CURSORS;
                        const int i = tidgap_holder(TIDGAP_PREFIX(s + 1, 1), down[4], Q[k]);
                        if (i > down[2]) break;  // its gradient is not sent yet
                        start = tidgap_max(start, TIDGAP_ARRIVAL(s + 1, 1)[i]);
                    }
                    const int size = backward[s * width + nb];
                    stage_free = start + backward_compute[s * table_width + size];
                    if (s > 0) {
                        tidgap_i64* G = TIDGAP_ARRIVAL(s, 1);
                        G[k] = tidgap_max(stage_free, G[k - 1]) +
                               backward_transfer[(s - 1) * table_width + size];
                    }
                    cursor[2] = k;
                }
                cursor[0] += 1;
                progressed = 1;
            }
            free_at[s] = stage_free;
        }
    }
    tidgap_i64 iteration = 0;
    for (int s = 0; s < stages; ++s) {
        const int* cursor = cursors + s * TIDGAP_CURSORS;
        if (cursor[0] < cursor[3] + cursor[4]) {  // a deadlock: rule 1 or 2 broken
            for (int t = 0; t < stages; ++t) peak_held[t] = 0;
            return TIDGAP_INVALID;
        }
        iteration = tidgap_max(iteration, free_at[s] + tails[s]);  // its last op: a backward
    }
#undef TIDGAP_PREFIX
#undef TIDGAP_ARRIVAL
    return iteration;
}

#endif
