// Host build of kernels/breed.cuh for tests: the GPU breeding kernel's per-child code,
// called through ctypes. Arguments as in kernels/breed.cu.
#include "breed.cuh"

extern "C" void tidgap_breed_host(
    const int* genes, const long long* fitness, long long population, int stages, int width,
    const long long* caps, int tournament_size, double crossover_rate, double mutation_rate,
    int num_mutations, const unsigned long long* streams, long long count, int* children) {
    for (long long c = 0; c < count; ++c) {
        tidgap_breed_child(c, genes, fitness, population, stages, width, caps, tournament_size,
                           crossover_rate, mutation_rate, num_mutations, streams,
                           children + c * stages * width);
    }
}
