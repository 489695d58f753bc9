// Host build of kernels/flush_chain.cuh for tests: the GPU kernel's per-individual recurrence,
// called through ctypes. Arguments as in kernels/flush_evaluate.cu, plus scratch per call.
#include <cstddef>
#include <vector>

#include "flush_chain.cuh"

extern "C" void tidgap_evaluate_host(
    const int* genes, tidgap_i64* fitness, long long population, int stages, int width,
    int reversed, const tidgap_i64* compute, const tidgap_i64* transfer,
    const tidgap_i64* tails, int table_width) {
    std::vector<tidgap_i64> scratch(4 * static_cast<std::size_t>(width));
    tidgap_i64* base = scratch.data();
    for (long long p = 0; p < population; ++p) {
        fitness[p] = tidgap_chain_fitness(
            genes + p * stages * width, stages, width, reversed, compute, transfer, tails,
            table_width, base, base + width, base + 2 * width, base + 3 * width);
    }
}
