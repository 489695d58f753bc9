// breed.cu: the offspring of one generation in one launch (selection, crossover, mutation).
//
// Computes children[c] = tidgap_breed_child(c, ...) (breed.cuh), equal to
// tidgap.optimize.operators.breed with the same seven draws, so a GPU search and a CPU search with
// the same seed breed the same children.
// Thread-to-work mapping: one thread per child c = blockIdx.x * blockDim.x + threadIdx.x
// (grid-stride loop); the thread copies its parents' stages into its child row block and
// mutates it in place in global memory.
// Arguments, in order:
//   genes (P, S, K) int32, fitness (P,) int64, population P, stages S, width K,
//   caps (S,) int64, tournament size, crossover rate, mutation rate, number of mutations,
//   streams (7,) uint64, children count C, children (C, S, K) int32 out.
#include "breed.cuh"

extern "C" __global__ void tidgap_breed(
    const int* __restrict__ genes, const long long* __restrict__ fitness, long long population,
    int stages, int width, const long long* __restrict__ caps, int tournament_size,
    double crossover_rate, double mutation_rate, int num_mutations,
    const unsigned long long* __restrict__ streams, long long count, int* __restrict__ children) {
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < count; c += step) {
        tidgap_breed_child(c, genes, fitness, population, stages, width, caps, tournament_size,
                           crossover_rate, mutation_rate, num_mutations, streams,
                           children + c * stages * width);
    }
}
