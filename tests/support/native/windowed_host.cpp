// Host build of kernels/windowed_sim.cuh for tests: the GPU kernel's per-individual event
// loop, called through ctypes. Arguments as in kernels/windowed_evaluate.cu; scratch here.
#include <cstddef>
#include <vector>

#include "windowed_sim.cuh"

extern "C" void tidgap_windowed_host(
    const int* forward, const int* backward, const signed char* order, tidgap_i64* fitness,
    tidgap_i64* peak_held, long long population, int stages, int width, int length,
    const tidgap_i64* forward_compute, const tidgap_i64* backward_compute,
    const tidgap_i64* forward_transfer, const tidgap_i64* backward_transfer,
    const tidgap_i64* tails, int table_width, const tidgap_i64* recompute_forward,
    const tidgap_i64* recompute_backward, const tidgap_i64* forward_after_backward,
    const tidgap_i64* backward_after_forward, int priced) {
    std::vector<tidgap_i64> arrivals(TIDGAP_ARRIVALS(static_cast<std::size_t>(stages), width));
    std::vector<int> sizes(TIDGAP_SIZES(static_cast<std::size_t>(stages), width));
    const long long genes = static_cast<long long>(stages) * width;
    for (long long p = 0; p < population; ++p) {
        fitness[p] = tidgap_ordered_fitness(
            forward + p * genes, backward + p * genes, order + p * stages * length, stages, width,
            length,
            forward_compute, backward_compute, forward_transfer, backward_transfer, tails,
            table_width, recompute_forward, recompute_backward, forward_after_backward,
            backward_after_forward, priced, arrivals.data(),
            sizes.data(), peak_held + p * stages);
    }
}

// TIDGAP_LANE_WORDS, for the test that tidgap.kernels.source.lane_scratch_bytes agrees.
extern "C" long long tidgap_lane_words_host(int stages, int width) {
    return TIDGAP_LANE_WORDS(static_cast<long long>(stages), width);
}
