// joint_breed.cu: the offspring of one joint-GA generation in one launch (selection,
// crossover, mutation, repair), and the annealing's step (mutation, repair) in another.
//
// Computes child c = tidgap_joint_breed_child(c, ...) (joint_breed.cuh), equal to
// tidgap.optimize.joint_operators.joint_breed with the same seven draws, codes included.
// Thread-to-work mapping: one thread per child c = blockIdx.x * blockDim.x + threadIdx.x
// (grid-stride loop); the thread copies its parents' stages into its child's rows, mutates
// and repairs them in place in global memory (no scratch).
// Arguments, in order:
//   forward, backward, lead (P, S, K) int32, fitness (P,) int64, population P, stages S,
//   width K, forward_caps, backward_caps (S,) int64, tournament size, crossover rate,
//   mutation rate, number of mutations (of the table drawn from), mirrored (0 or 1: draw from
//   MIRRORED_MUTATIONS and mirror each child), streams (7,) uint64, children count C,
//   children's forward, backward, lead (C, S, K) int32 out, codes (C, S, 2K) int8 out.
#include "joint_breed.cuh"

extern "C" __global__ void tidgap_joint_breed(
    const int* __restrict__ forward, const int* __restrict__ backward,
    const int* __restrict__ lead, const long long* __restrict__ fitness, long long population,
    int stages, int width, const long long* __restrict__ forward_caps,
    const long long* __restrict__ backward_caps, int tournament_size, double crossover_rate,
    double mutation_rate, int num_mutations, int mirrored,
    const unsigned long long* __restrict__ streams, long long count,
    int* __restrict__ child_forward, int* __restrict__ child_backward,
    int* __restrict__ child_lead, signed char* __restrict__ child_codes) {
    const long long genes = (long long)stages * width;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < count; c += step) {
        tidgap_joint_breed_child(c, forward, backward, lead, fitness, population, stages, width,
                                 forward_caps, backward_caps, tournament_size, crossover_rate,
                                 mutation_rate, num_mutations, mirrored, streams,
                                 child_forward + c * genes,
                                 child_backward + c * genes, child_lead + c * genes,
                                 child_codes + 2 * c * genes);
    }
}

// tidgap_joint_mutate: child c = individual c, mutated and repaired in place
// (tidgap_joint_mutate_child: tidgap.optimize.joint_operators.mutate_repaired with the same
// three draws). One thread per individual, grid-stride loop. Arguments, in order:
//   forward, backward, lead (P, S, K) int32, population P, stages S, width K, forward_caps,
//   backward_caps (S,) int64, mutation rate, number of mutations, mirrored (as above),
//   streams (3,) uint64,
//   children's forward, backward, lead (P, S, K) int32 out, codes (P, S, 2K) int8 out.
extern "C" __global__ void tidgap_joint_mutate(
    const int* __restrict__ forward, const int* __restrict__ backward,
    const int* __restrict__ lead, long long population, int stages, int width,
    const long long* __restrict__ forward_caps, const long long* __restrict__ backward_caps,
    double mutation_rate, int num_mutations, int mirrored,
    const unsigned long long* __restrict__ streams, int* __restrict__ child_forward,
    int* __restrict__ child_backward, int* __restrict__ child_lead,
    signed char* __restrict__ child_codes) {
    const long long genes = (long long)stages * width;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < population;
         c += step) {
        for (long long i = c * genes; i < (c + 1) * genes; ++i) {
            child_forward[i] = forward[i];
            child_backward[i] = backward[i];
            child_lead[i] = lead[i];
        }
        tidgap_joint_mutate_child(c, stages, width, forward_caps, backward_caps, mutation_rate,
                                  num_mutations, mirrored, streams, child_forward + c * genes,
                                  child_backward + c * genes, child_lead + c * genes,
                                  child_codes + 2 * c * genes);
    }
}
