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
// and returns max_s (EB[s][N_s] + tail_s), and peak_held[s] = the most P[s][k] - Q[s][j]
// after a forward (units), or TIDGAP_INVALID (peak_held all 0) when the order breaks rule
// `count` or cannot finish (rules 1 or 2 broken: a deadlock). Arrays (row-major; int64
// ticks, int32 sizes in units, int8 ops):
//   forward, backward (S, K)  sizes, zeros after each row's last
//   order             (S, L)  ops per stage: TIDGAP_FORWARD_OP, TIDGAP_BACKWARD_OP, then
//                             TIDGAP_NO_OP after the last (tidgap.optimize.genome's codes)
//   forward_compute, backward_compute (S, T); forward_transfer, backward_transfer (S-1, T),
//   backward_transfer[l] indexed by the sender's (stage l+1) size; tails (S,); T = U + 1
//   recompute_forward, recompute_backward (S, T): a recomputing stage's ops, read where
//                     `priced` (plans priced as tidgap run runs them: a stage with a backward
//                     boundary that is not a forward boundary recomputes, its ops at these;
//                     on any other a backward costs the sum of backward_compute over the
//                     forward chunks it covers; tidgap/backends/run_pricing.py's rule)
//   forward_after_backward, backward_after_forward (S, T): read where `priced`, on a stage
//                     that does not recompute: a forward right after a backward of its
//                     size, and on the last stage a backward right after the forward of
//                     the same samples
//   arrivals          (S (2 (K+1) + 1)) int64 scratch: A and A' per stage (K+1 each), then
//                     each stage's free time (the end of its last op)
//   sizes             (S (2 (K+1) + TIDGAP_CURSORS)) int32 scratch: P and Q per stage (K+1
//                     each, in units), then each stage's cursors
// EF and EB are not kept: a stage's ops run one after another, so the end of its own
// forward is never after its free time, and its last op is its last backward (which needs
// the last forward), whose end is the free time the loop ends with.
//
// The work is cut per stage so that one thread can run every stage in turn
// (tidgap_ordered_fitness: windowed_evaluate.cu, tests/support/native/windowed_host.cpp) or
// one lane per stage can run them side by side (windowed_lanes.cu): tidgap_stage_setup,
// then rounds of tidgap_stage_snapshot (how far the neighbours have sent) and
// tidgap_stage_advance (run the stage's ops that this lets it run) until no stage advances,
// then tidgap_ordered_finish. A stage only reads what its neighbours had sent when it took
// its snapshot, and those arrivals never change again, so every order of the stages' turns
// gives the same ticks.
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

// Cursors per stage: ops done (-1 when the stage breaks rule count), forwards done,
// backwards done, M_s, N_s, the most samples held after a forward (units), whether the stage
// recomputes (run pricing; else 0).
#define TIDGAP_CURSORS 7
#define TIDGAP_OPS_DONE 0
#define TIDGAP_FORWARDS_DONE 1
#define TIDGAP_BACKWARDS_DONE 2
#define TIDGAP_FORWARD_COUNT 3
#define TIDGAP_BACKWARD_COUNT 4
#define TIDGAP_PEAK_HELD 5
#define TIDGAP_RECOMPUTES 6

// int64 entries of `arrivals` and int32 entries of `sizes` for S stages of width K.
#define TIDGAP_ARRIVALS(stages, width) ((stages) * (2 * ((width) + 1) + 1))
#define TIDGAP_SIZES(stages, width) ((stages) * (2 * ((width) + 1) + TIDGAP_CURSORS))
// int64 words of one individual's scratch in windowed_lanes.cu: its arrivals, then its sizes
// and two snapshot counts per stage as int32, rounded up to whole words.
#define TIDGAP_LANE_WORDS(stages, width) \
    (TIDGAP_ARRIVALS(stages, width) + (TIDGAP_SIZES(stages, width) + 2 * (stages) + 1) / 2)

// One individual's genes (row pointers of its (S, K) sizes and (S, L) order).
struct tidgap_ordered_genes {
    const int* forward;
    const int* backward;
    const signed char* order;
    int stages, width, length;
};

// The problem's tables in ticks (T = table_width entries per row).
struct tidgap_ordered_tables {
    const tidgap_i64* forward_compute;
    const tidgap_i64* backward_compute;
    const tidgap_i64* forward_transfer;
    const tidgap_i64* backward_transfer;
    const tidgap_i64* tails;
    int table_width;
    const tidgap_i64* recompute_forward;
    const tidgap_i64* recompute_backward;
    const tidgap_i64* forward_after_backward;
    const tidgap_i64* backward_after_forward;
    int priced;
};

// An individual's scratch: `arrivals` and `sizes` as laid out above.
struct tidgap_ordered_scratch {
    tidgap_i64* arrivals;
    int* sizes;
    int row;     // K + 1
    int stages;  // S

    __host__ __device__ int* prefix(int s, int which) const {  // P (0) or Q (1) of stage s
        return sizes + (2 * s + which) * row;
    }
    __host__ __device__ tidgap_i64* arrival(int s, int which) const {  // A (0) or A' (1)
        return arrivals + (2 * s + which) * row;
    }
    __host__ __device__ tidgap_i64* free_at() const { return arrivals + 2 * stages * row; }
    __host__ __device__ int* cursor(int s) const {
        return sizes + 2 * stages * row + s * TIDGAP_CURSORS;
    }
};

// min{i : prefix[i] >= sample} over prefix[0..count] (non-decreasing, prefix[count] = total).
__host__ __device__ inline int tidgap_holder(const int* prefix, int count, int sample) {
    int low = 0, high = count;
    while (low < high) {
        int middle = (low + high) / 2;
        if (prefix[middle] >= sample) high = middle; else low = middle + 1;
    }
    return low;
}

// Stage s's prefix sums, cursors (under run pricing, whether it recomputes) and first
// arrivals; returns 0 (and marks the stage) when its order breaks rule count.
__host__ __device__ inline int tidgap_stage_setup(
    const tidgap_ordered_genes& genes, const tidgap_ordered_tables& tables,
    const tidgap_ordered_scratch& scratch, int s) {
    const int width = genes.width, ops = genes.length;
    int* P = scratch.prefix(s, 0);
    int* Q = scratch.prefix(s, 1);
    int m = 0, n = 0;
    P[0] = 0;
    Q[0] = 0;
    for (int k = 0; k < width; ++k) {
        const int f = genes.forward[s * width + k], c = genes.backward[s * width + k];
        if (f > 0) { P[m + 1] = P[m] + f; ++m; }
        if (c > 0) { Q[n + 1] = Q[n] + c; ++n; }
    }
    int fs = 0, bs = 0, j = 0;
    for (; j < ops && genes.order[s * ops + j] >= 0; ++j) {
        const signed char code = genes.order[s * ops + j];
        if (code == TIDGAP_FORWARD_OP) ++fs; else if (code == TIDGAP_BACKWARD_OP) ++bs; else fs = -1;
    }
    for (; j < ops; ++j) {
        if (genes.order[s * ops + j] != TIDGAP_NO_OP) fs = -1;  // an op after the padding
    }
    scratch.arrival(s, 0)[0] = TIDGAP_NEVER;
    scratch.arrival(s, 1)[0] = TIDGAP_NEVER;
    scratch.free_at()[s] = 0;
    int* cursor = scratch.cursor(s);
    const int valid = fs == m && bs == n;
    cursor[TIDGAP_OPS_DONE] = valid ? 0 : -1;
    cursor[TIDGAP_FORWARDS_DONE] = cursor[TIDGAP_BACKWARDS_DONE] = cursor[TIDGAP_PEAK_HELD] = 0;
    cursor[TIDGAP_FORWARD_COUNT] = m;
    cursor[TIDGAP_BACKWARD_COUNT] = n;
    int recomputes = 0;
    for (int k = 1; tables.priced && k <= n; ++k) recomputes |= P[tidgap_holder(P, m, Q[k])] != Q[k];
    cursor[TIDGAP_RECOMPUTES] = recomputes;
    return valid;
}

// How far stage s's neighbours have got: the forwards stage s-1 has run (*sent_down) and the
// backwards stage s+1 has run (*sent_up); 0 where there is no such neighbour.
__host__ __device__ inline void tidgap_stage_snapshot(
    const tidgap_ordered_scratch& scratch, int s, int* sent_down, int* sent_up) {
    *sent_down = s > 0 ? scratch.cursor(s - 1)[TIDGAP_FORWARDS_DONE] : 0;
    *sent_up = s < scratch.stages - 1 ? scratch.cursor(s + 1)[TIDGAP_BACKWARDS_DONE] : 0;
}

// Runs stage s's next ops while the first `sent_down` forwards of stage s-1 and `sent_up`
// backwards of stage s+1 let them; returns 1 if it ran any. Writes only stage s's own
// arrivals, free time and cursors.
__host__ __device__ inline int tidgap_stage_advance(
    const tidgap_ordered_genes& genes, const tidgap_ordered_tables& tables,
    const tidgap_ordered_scratch& scratch, int s, int sent_down, int sent_up) {
    const int stages = genes.stages, width = genes.width, ops = genes.length;
    const int table_width = tables.table_width;
    const int* P = scratch.prefix(s, 0);
    const int* Q = scratch.prefix(s, 1);
    int* cursor = scratch.cursor(s);
    if (cursor[TIDGAP_OPS_DONE] < 0) return 0;  // breaks rule count: never runs
    const int length = cursor[TIDGAP_FORWARD_COUNT] + cursor[TIDGAP_BACKWARD_COUNT];
    tidgap_i64 stage_free = scratch.free_at()[s];
    int done = cursor[TIDGAP_OPS_DONE], nf = cursor[TIDGAP_FORWARDS_DONE];
    int nb = cursor[TIDGAP_BACKWARDS_DONE], peak = cursor[TIDGAP_PEAK_HELD];
    const int first = done;
    const int priced_by_order = tables.priced && !cursor[TIDGAP_RECOMPUTES];
    while (done < length) {
        const signed char op = genes.order[s * ops + done];
        const signed char before = done > 0 ? genes.order[s * ops + done - 1] : TIDGAP_NO_OP;
        tidgap_i64 start = stage_free;  // the stage is free when its previous op ends
        if (op == TIDGAP_FORWARD_OP) {
            const int k = nf + 1;
            if (s > 0) {
                const int i = tidgap_holder(
                    scratch.prefix(s - 1, 0), scratch.cursor(s - 1)[TIDGAP_FORWARD_COUNT], P[k]);
                if (i > sent_down) break;  // its activations are not sent yet
                start = tidgap_max(start, scratch.arrival(s - 1, 0)[i]);
            }
            const int size = genes.forward[s * width + nf];
            const tidgap_i64* compute = tables.forward_compute;
            if (cursor[TIDGAP_RECOMPUTES]) {
                compute = tables.recompute_forward;
            } else if (priced_by_order && before == TIDGAP_BACKWARD_OP &&
                       genes.backward[s * width + nb - 1] == size) {  // after one of its size
                compute = tables.forward_after_backward;
            }
            stage_free = start + compute[s * table_width + size];
            if (s < stages - 1) {
                tidgap_i64* A = scratch.arrival(s, 0);
                A[k] = tidgap_max(stage_free, A[k - 1]) +
                       tables.forward_transfer[s * table_width + size];
            }
            peak = peak > P[k] - Q[nb] ? peak : P[k] - Q[nb];
            nf = k;
        } else {
            const int k = nb + 1;
            // its own forward has not run (once it has, it ended by `stage_free`)
            const int own = tidgap_holder(P, cursor[TIDGAP_FORWARD_COUNT], Q[k]);
            if (own > nf) break;
            if (s < stages - 1) {
                const int i = tidgap_holder(
                    scratch.prefix(s + 1, 1), scratch.cursor(s + 1)[TIDGAP_BACKWARD_COUNT], Q[k]);
                if (i > sent_up) break;  // its gradient is not sent yet
                start = tidgap_max(start, scratch.arrival(s + 1, 1)[i]);
            }
            const int size = genes.backward[s * width + nb];
            tidgap_i64 cost;
            if (cursor[TIDGAP_RECOMPUTES]) {
                cost = tables.recompute_backward[s * table_width + size];
            } else if (priced_by_order && s == stages - 1 && before == TIDGAP_FORWARD_OP &&
                       P[nf - 1] == Q[k - 1] && P[nf] == Q[k]) {  // after its own forward
                cost = tables.backward_after_forward[s * table_width + size];
            } else if (tables.priced) {  // the stored forward chunks it covers, one graph each
                cost = 0;
                const int first = tidgap_holder(P, cursor[TIDGAP_FORWARD_COUNT], Q[k - 1]);
                for (int i = first; i < own; ++i) {
                    cost += tables.backward_compute[s * table_width + genes.forward[s * width + i]];
                }
            } else {
                cost = tables.backward_compute[s * table_width + size];
            }
            stage_free = start + cost;
            if (s > 0) {
                tidgap_i64* G = scratch.arrival(s, 1);
                G[k] = tidgap_max(stage_free, G[k - 1]) +
                       tables.backward_transfer[(s - 1) * table_width + size];
            }
            nb = k;
        }
        ++done;
    }
    scratch.free_at()[s] = stage_free;
    cursor[TIDGAP_OPS_DONE] = done;
    cursor[TIDGAP_FORWARDS_DONE] = nf;
    cursor[TIDGAP_BACKWARDS_DONE] = nb;
    cursor[TIDGAP_PEAK_HELD] = peak;
    return done > first;
}

// The iteration time once no stage advances, with peak_held (S,) written: max_s (free_s +
// tail_s) (a stage's last op is a backward), or TIDGAP_INVALID and zeros when a stage broke
// rule count or did not finish (a deadlock: rule 1 or 2 broken).
__host__ __device__ inline tidgap_i64 tidgap_ordered_finish(
    const tidgap_ordered_tables& tables, const tidgap_ordered_scratch& scratch,
    tidgap_i64* peak_held) {
    tidgap_i64 iteration = 0;
    for (int s = 0; s < scratch.stages; ++s) {
        const int* cursor = scratch.cursor(s);
        if (cursor[TIDGAP_OPS_DONE] != cursor[TIDGAP_FORWARD_COUNT] + cursor[TIDGAP_BACKWARD_COUNT]) {
            for (int t = 0; t < scratch.stages; ++t) peak_held[t] = 0;
            return TIDGAP_INVALID;
        }
        iteration = tidgap_max(iteration, scratch.free_at()[s] + tables.tails[s]);
    }
    for (int s = 0; s < scratch.stages; ++s) peak_held[s] = scratch.cursor(s)[TIDGAP_PEAK_HELD];
    return iteration;
}

// The parameters of a population kernel (windowed_evaluate.cu, windowed_lanes.cu): the
// population's genes (P, S, K) and (P, S, L), its outputs fitness (P,) and peak_held (P, S),
// P, S, K, L, then the tables and T, then the recompute and order tables (S, T) and whether
// plans are run-priced (else those four are not read).
#define TIDGAP_ORDERED_PARAMETERS                                                          \
    const int *__restrict__ forward, const int *__restrict__ backward,                     \
        const signed char *__restrict__ order, tidgap_i64 *__restrict__ fitness,           \
        tidgap_i64 *__restrict__ peak_held, long long population, int stages, int width,   \
        int length, const tidgap_i64 *__restrict__ forward_compute,                        \
        const tidgap_i64 *__restrict__ backward_compute,                                   \
        const tidgap_i64 *__restrict__ forward_transfer,                                   \
        const tidgap_i64 *__restrict__ backward_transfer,                                  \
        const tidgap_i64 *__restrict__ tails, int table_width,                           \
        const tidgap_i64 *__restrict__ recompute_forward,                                  \
        const tidgap_i64 *__restrict__ recompute_backward,                                 \
        const tidgap_i64 *__restrict__ forward_after_backward,                             \
        const tidgap_i64 *__restrict__ backward_after_forward, int priced

// One thread's evaluation of one individual: the stages take turns, each with a fresh
// snapshot, until none advances.
__host__ __device__ inline tidgap_i64 tidgap_ordered_fitness(
    const int* forward, const int* backward, const signed char* order, int stages, int width,
    int length, const tidgap_i64* forward_compute, const tidgap_i64* backward_compute,
    const tidgap_i64* forward_transfer, const tidgap_i64* backward_transfer,
    const tidgap_i64* tails, int table_width, const tidgap_i64* recompute_forward,
    const tidgap_i64* recompute_backward, const tidgap_i64* forward_after_backward,
    const tidgap_i64* backward_after_forward, int priced, tidgap_i64* arrivals, int* sizes,
    tidgap_i64* peak_held) {
    const tidgap_ordered_genes genes = {forward, backward, order, stages, width, length};
    const tidgap_ordered_tables tables = {
        forward_compute,        backward_compute,   forward_transfer,
        backward_transfer,      tails,              table_width,
        recompute_forward,      recompute_backward, forward_after_backward,
        backward_after_forward, priced};
    const tidgap_ordered_scratch scratch = {arrivals, sizes, width + 1, stages};
    int valid = 1;
    for (int s = 0; s < stages; ++s) valid &= tidgap_stage_setup(genes, tables, scratch, s);
    int progressed = valid;
    while (progressed) {
        progressed = 0;
        for (int s = 0; s < stages; ++s) {
            int sent_down, sent_up;
            tidgap_stage_snapshot(scratch, s, &sent_down, &sent_up);
            progressed |= tidgap_stage_advance(genes, tables, scratch, s, sent_down, sent_up);
        }
    }
    return tidgap_ordered_finish(tables, scratch, peak_held);
}

#endif
