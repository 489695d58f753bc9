// joint_breed.cu: the offspring of one joint-GA generation in one launch (selection,
// crossover, mutation, repair).
//
// Computes child c = tidgap_joint_breed_child(c, ...) (joint_breed.cuh), equal to
// tidgap.optimize.joint_operators.joint_breed with the same seven draws, codes included.
// Thread-to-work mapping: one thread per child c = blockIdx.x * blockDim.x + threadIdx.x
// (grid-stride loop); the thread copies its parents' stages into its child's rows, mutates
// and repairs them in place in global memory (no scratch).
// Arguments, in order:
//   forward, backward, lead (P, S, K) int32, fitness (P,) int64, population P, stages S,
//   width K, forward_caps, backward_caps (S,) int64, tournament size, crossover rate,
//   mutation rate, number of mutations, streams (7,) uint64, children count C,
//   children's forward, backward, lead (C, S, K) int32 out, codes (C, S, 2K) int8 out.
#include "joint_breed.cuh"

extern "C" __global__ void tidgap_joint_breed(
    const int* __restrict__ forward, const int* __restrict__ backward,
    const int* __restrict__ lead, const long long* __restrict__ fitness, long long population,
    int stages, int width, const long long* __restrict__ forward_caps,
    const long long* __restrict__ backward_caps, int tournament_size, double crossover_rate,
    double mutation_rate, int num_mutations, const unsigned long long* __restrict__ streams,
    long long count, int* __restrict__ child_forward, int* __restrict__ child_backward,
    int* __restrict__ child_lead, signed char* __restrict__ child_codes) {
    const long long genes = (long long)stages * width;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < count; c += step) {
        tidgap_joint_breed_child(c, forward, backward, lead, fitness, population, stages, width,
                                 forward_caps, backward_caps, tournament_size, crossover_rate,
                                 mutation_rate, num_mutations, streams, child_forward + c * genes,
                                 child_backward + c * genes, child_lead + c * genes,
                                 child_codes + 2 * c * genes);
    }
}
