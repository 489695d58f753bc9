// Host build of kernels/joint_breed.cuh for tests: the joint GA's per-child breeding and
// repair, and the annealing's mutation and repair, called through ctypes. Arguments as in
// kernels/joint_breed.cu.
#include "joint_breed.cuh"

extern "C" void tidgap_joint_breed_host(
    const int* forward, const int* backward, const int* lead, const long long* fitness,
    long long population, int stages, int width, const long long* forward_caps,
    const long long* backward_caps, int tournament_size, double crossover_rate,
    double mutation_rate, int num_mutations, int mirrored, const unsigned long long* streams,
    long long count, int* child_forward, int* child_backward, int* child_lead,
    signed char* child_codes) {
    const long long genes = static_cast<long long>(stages) * width;
    for (long long c = 0; c < count; ++c) {
        tidgap_joint_breed_child(c, forward, backward, lead, fitness, population, stages, width,
                                 forward_caps, backward_caps, tournament_size, crossover_rate,
                                 mutation_rate, num_mutations, mirrored, streams,
                                 child_forward + c * genes,
                                 child_backward + c * genes, child_lead + c * genes,
                                 child_codes + 2 * c * genes);
    }
}

extern "C" void tidgap_joint_mutate_host(
    int* forward, int* backward, int* lead, long long population, int stages, int width,
    const long long* forward_caps, const long long* backward_caps, double mutation_rate,
    int num_mutations, int mirrored, const unsigned long long* streams, signed char* codes) {
    const long long genes = static_cast<long long>(stages) * width;
    for (long long c = 0; c < population; ++c) {
        tidgap_joint_mutate_child(c, stages, width, forward_caps, backward_caps, mutation_rate,
                                  num_mutations, mirrored, streams, forward + c * genes,
                                  backward + c * genes, lead + c * genes, codes + 2 * c * genes);
    }
}
