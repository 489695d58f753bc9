// windowed_lanes.cu: iteration time and peak held samples of every individual of a
// population of ordered plans, one lane per stage.
//
// Computes the same as windowed_evaluate.cu (windowed_sim.cuh's ticks, exactly), mapped
// differently: a group of TIDGAP_GROUP lanes of one warp (a power of two >= S, <= 32) scores
// one individual, lane s running stage s; the warp holds 32 / TIDGAP_GROUP individuals and a
// block of one warp keeps their scratch in shared memory (launch with shared_mem = the
// groups' bytes, tidgap.kernels.source.lane_scratch_bytes). Rounds: every lane takes its
// snapshot of its neighbours, the warp syncs, every lane advances its stage, the warp syncs;
// the rounds end when no lane of the warp advanced. Grid-stride over the warps' first
// individuals, so every lane of a warp runs the same rounds and syncs.
// Compiled by g++ (the CuPy stand-in, one thread of one block), the one thread runs every
// lane of each round in turn: the same rounds, serially. A host build that defines
// TIDGAP_WARP_SYNC, TIDGAP_WARP_ANY and TIDGAP_HOST_GROUPS (the groups its scratch holds)
// runs a warp of threads instead (tests/support/native/lanes_warp.cpp, under
// ThreadSanitizer).
// Arguments, in order: windowed_evaluate.cu's (TIDGAP_ORDERED_PARAMETERS).
#include "windowed_sim.cuh"

#ifndef TIDGAP_GROUP
#define TIDGAP_GROUP 8
#endif
#ifndef TIDGAP_MAX_K
#define TIDGAP_MAX_K 64
#endif

#ifdef __CUDA_ARCH__
#define TIDGAP_WARP_SYNC() __syncwarp()
#define TIDGAP_WARP_ANY(flag) __any_sync(0xffffffffu, (flag))
#elif !defined(TIDGAP_WARP_SYNC)
#define TIDGAP_WARP_SYNC()
#define TIDGAP_WARP_ANY(flag) (flag)
#endif
#ifndef TIDGAP_HOST_GROUPS
#define TIDGAP_HOST_GROUPS 1
#endif

extern "C" __global__ void tidgap_windowed_lanes(TIDGAP_ORDERED_PARAMETERS) {
#ifdef __CUDA_ARCH__
    extern __shared__ tidgap_i64 tidgap_lane_scratch[];
#else
    static tidgap_i64
        tidgap_lane_scratch[TIDGAP_HOST_GROUPS * TIDGAP_LANE_WORDS(TIDGAP_GROUP, TIDGAP_MAX_K)];
#endif
    // A whole warp of lanes on the GPU; one thread standing for every lane on the host.
    const bool warp = blockDim.x >= TIDGAP_GROUP;
    const int groups = warp ? blockDim.x / TIDGAP_GROUP : 1;
    const int slot = warp ? threadIdx.x / TIDGAP_GROUP : 0;
    const int first_lane = warp ? threadIdx.x % TIDGAP_GROUP : 0;
    const int lane_step = warp ? TIDGAP_GROUP : 1;
    const long long words = TIDGAP_LANE_WORDS(stages, width);
    tidgap_i64* mine = tidgap_lane_scratch + slot * words;
    const tidgap_ordered_scratch scratch = {
        mine, (int*)(mine + TIDGAP_ARRIVALS(stages, width)), width + 1, stages};
    int* snapshots = scratch.sizes + TIDGAP_SIZES(stages, width);
    const tidgap_ordered_tables tables = {
        forward_compute,        backward_compute,   forward_transfer,
        backward_transfer,      tails,              table_width,
        recompute_forward,      recompute_backward, forward_after_backward,
        backward_after_forward, priced};
    const long long genes_per_individual = (long long)stages * width;
    for (long long base = (long long)blockIdx.x * groups; base < population;
         base += (long long)gridDim.x * groups) {
        const long long p = base + slot;
        const bool active = p < population;
        const long long read = active ? p : 0;  // an idle slot's lanes read nothing
        const tidgap_ordered_genes genes = {
            forward + read * genes_per_individual, backward + read * genes_per_individual,
            order + read * stages * length, stages, width, length};
        for (int s = first_lane; active && s < stages; s += lane_step) {
            tidgap_stage_setup(genes, tables, scratch, s);
        }
        TIDGAP_WARP_SYNC();
        for (;;) {
            for (int s = first_lane; active && s < stages; s += lane_step) {
                tidgap_stage_snapshot(scratch, s, snapshots + 2 * s, snapshots + 2 * s + 1);
            }
            TIDGAP_WARP_SYNC();
            int progressed = 0;
            for (int s = first_lane; active && s < stages; s += lane_step) {
                progressed |= tidgap_stage_advance(
                    genes, tables, scratch, s, snapshots[2 * s], snapshots[2 * s + 1]);
            }
            TIDGAP_WARP_SYNC();
            if (!TIDGAP_WARP_ANY(progressed)) break;
        }
        if (active && first_lane == 0) {
            fitness[p] = tidgap_ordered_finish(tables, scratch, peak_held + p * stages);
        }
        TIDGAP_WARP_SYNC();  // the finish reads the scratch the next individual overwrites
    }
}
