// windowed_evaluate.cu: iteration time and peak held samples of every individual of a
// population of ordered plans (forward and backward partitions plus each stage's order).
//
// Computes fitness[p] = tidgap_ordered_fitness(...) (windowed_sim.cuh) in integer ticks, and
// peak_held[p, s] in units, exactly as the CPU backends do; an order that breaks rule
// `count` or cannot finish scores TIDGAP_INVALID.
// Thread-to-work mapping: one thread per individual p = blockIdx.x * blockDim.x +
// threadIdx.x (grid-stride loop); each thread runs its individual's event loop
// sequentially with its scratch in local memory (2 (TIDGAP_MAX_K + 1) + 1 int64 and
// 2 (TIDGAP_MAX_K + 1) + TIDGAP_CURSORS int per stage, TIDGAP_MAX_S stages, set at compile
// time by the launcher to powers of two >= K and >= S).
// Arguments, in order (TIDGAP_ORDERED_PARAMETERS, windowed_sim.cuh):
//   forward, backward (P, S, K) int32, order (P, S, L) int8, fitness (P,) int64 out,
//   peak_held (P, S) int64 out, population P, stages S, width K, length L, forward_compute and
//   backward_compute (S, T) int64, forward_transfer and backward_transfer (S-1, T) int64,
//   tails (S,) int64, T, recompute_forward, recompute_backward, forward_after_backward and
//   backward_after_forward (S, T) int64 and priced (run pricing where not 0).
#include "windowed_sim.cuh"

#ifndef TIDGAP_MAX_K
#define TIDGAP_MAX_K 64
#endif
#ifndef TIDGAP_MAX_S
#define TIDGAP_MAX_S 16
#endif

extern "C" __global__ void tidgap_windowed_evaluate(TIDGAP_ORDERED_PARAMETERS) {
    tidgap_i64 arrivals[TIDGAP_ARRIVALS(TIDGAP_MAX_S, TIDGAP_MAX_K)];
    int sizes[TIDGAP_SIZES(TIDGAP_MAX_S, TIDGAP_MAX_K)];
    const long long genes = (long long)stages * width;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < population;
         p += step) {
        fitness[p] = tidgap_ordered_fitness(
            forward + p * genes, backward + p * genes, order + p * stages * length, stages, width, length,
            forward_compute, backward_compute, forward_transfer, backward_transfer, tails,
            table_width, recompute_forward, recompute_backward, forward_after_backward,
            backward_after_forward, priced, arrivals, sizes,
            peak_held + p * stages);
    }
}
