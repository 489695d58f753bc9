// flush_evaluate.cu: fitness of every individual of a population, one direction at a time.
//
// Computes fitness[p] = tidgap_chain_fitness(genes[p], ...) (flush_chain.cuh): the forward end
// (forward chain, zero tails) or the backward span (reversed chain, stage tails) in
// integer ticks, exactly as the CPU backends do.
// Thread-to-work mapping: one thread per individual p = blockIdx.x * blockDim.x +
// threadIdx.x (grid-stride loop); each thread walks its individual's stages and
// microbatches sequentially with its scratch in local memory (TIDGAP_MAX_K entries per
// array, set at compile time by the launcher to a power of two >= K).
// Arguments, in order:
//   genes (P, S, K) int32, fitness (P,) int64 out, population P, stages S, width K,
//   reversed (0/1), compute (S, T) int64, transfer (S-1, T) int64, tails (S,) int64, T.
#include "flush_chain.cuh"

#ifndef TIDGAP_MAX_K
#define TIDGAP_MAX_K 64
#endif

extern "C" __global__ void tidgap_evaluate(
    const int* __restrict__ genes, tidgap_i64* __restrict__ fitness,
    long long population, int stages, int width, int reversed,
    const tidgap_i64* __restrict__ compute, const tidgap_i64* __restrict__ transfer,
    const tidgap_i64* __restrict__ tails, int table_width) {
    tidgap_i64 ends_a[TIDGAP_MAX_K], ends_b[TIDGAP_MAX_K];
    tidgap_i64 prefix_a[TIDGAP_MAX_K], prefix_b[TIDGAP_MAX_K];
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < population;
         p += step) {
        fitness[p] = tidgap_chain_fitness(
            genes + p * stages * width, stages, width, reversed, compute, transfer, tails,
            table_width, ends_a, ends_b, prefix_a, prefix_b);
    }
}
