// flush_chain.cuh: one individual's pipeline chain, as __host__ __device__ code.
//
// Computes the UMPIPE end-time recurrence (docs/model.md) for ONE individual and ONE
// direction, in integer ticks, starting at time 0:
//   F_k = max(F_{k-1}, R_k) + compute[j][b_k]                        F_0 = 0
//   R_k = A_up[i], i = first upstream microbatch whose prefix sum reaches this one's
//   A_up[i] = max(F_up[i], A_up[i-1]) + transfer[j-1][b_up_i]         A_up[0] = -inf
// for chain positions j = 0..S-1 (R_k = 0 at j = 0), and returns
//   max_j (end of position j's last microbatch + tail[j]).
// The forward pass is the chain of stages 0..S-1 with zero tails (its value is the
// forward end); the backward pass is stages S-1..0 with the stages' tails (the backward
// span). Arrays (row-major, int64 ticks, int32 sizes in units):
//   genes     (S, K)   this individual's sizes, stage order; zeros after each row's last
//   compute   (S, T)   chain order; T = U + 1 table entries per size 0..U
//   transfer  (S-1, T) chain order, indexed by the sender's size
//   tails     (S,)     chain order
// `reversed` reads gene row S-1-j at chain position j. Scratch: four arrays of K
// entries (two stages' end times and prefix sums, ping-ponged).
// The same code is compiled by NVRTC for the GPU (flush_evaluate.cu) and by the host compiler
// for tests (tests/support/native/chain_host.cpp), so a wrong kernel fails CI without a GPU.
#ifndef TIDGAP_CHAIN_CUH
#define TIDGAP_CHAIN_CUH

#ifndef __CUDACC__
#define __host__
#define __device__
#endif

typedef long long tidgap_i64;

__host__ __device__ inline tidgap_i64 tidgap_max(tidgap_i64 a, tidgap_i64 b) {
    return a > b ? a : b;
}

__host__ __device__ inline tidgap_i64 tidgap_chain_fitness(
    const int* genes, int stages, int width, int reversed,
    const tidgap_i64* compute, const tidgap_i64* transfer, const tidgap_i64* tails,
    int table_width,
    tidgap_i64* ends_a, tidgap_i64* ends_b, tidgap_i64* prefix_a, tidgap_i64* prefix_b) {
    tidgap_i64* up_ends = ends_a;
    tidgap_i64* up_prefix = prefix_a;
    tidgap_i64* own_ends = ends_b;
    tidgap_i64* own_prefix = prefix_b;
    tidgap_i64 fitness = 0;
    int up_count = 0;
    for (int j = 0; j < stages; ++j) {
        const int* own = genes + (reversed ? stages - 1 - j : j) * width;
        const tidgap_i64* table = compute + j * table_width;
        tidgap_i64 finish = 0;
        tidgap_i64 samples = 0;
        int count = 0;
        if (j == 0) {
            for (; count < width && own[count] > 0; ++count) {
                finish += table[own[count]];
                samples += own[count];
                own_ends[count] = finish;
                own_prefix[count] = samples;
            }
        } else {
            // Upstream end times become arrival times, in place (A_up[0] = -inf, so the
            // first arrival is max(F_up[1], F_up[1]) + its transfer).
            const int* up = genes + (reversed ? stages - j : j - 1) * width;
            const tidgap_i64* link = transfer + (j - 1) * table_width;
            tidgap_i64 arrival = up_ends[0];
            for (int i = 0; i < up_count; ++i) {
                arrival = tidgap_max(up_ends[i], arrival) + link[up[i]];
                up_ends[i] = arrival;
            }
            int i = 0;
            for (; count < width && own[count] > 0; ++count) {
                samples += own[count];
                while (i < up_count - 1 && up_prefix[i] < samples) ++i;
                finish = tidgap_max(finish, up_ends[i]) + table[own[count]];
                own_ends[count] = finish;
                own_prefix[count] = samples;
            }
        }
        fitness = tidgap_max(fitness, finish + tails[j]);
        up_count = count;
        tidgap_i64* swap = up_ends; up_ends = own_ends; own_ends = swap;
        swap = up_prefix; up_prefix = own_prefix; own_prefix = swap;
    }
    return fitness;
}

#endif  // TIDGAP_CHAIN_CUH
