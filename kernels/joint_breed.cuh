// joint_breed.cuh: one child of a joint-GA generation, as __host__ __device__ code.
//
// Computes child c of tidgap.optimize.joint_operators.joint_breed exactly: the selection,
// stage crossover (each stage's three rows from one parent) and draws of breed.cuh, at most
// one mutation from the JOINT_MUTATIONS registry, then the repair of
// tidgap.optimize.order_genes.canonical. `streams` holds the seven stream keys in draw order
// (breed.cuh). Arrays (row-major): forward, backward, lead (P, S, K) int32 parents, fitness
// (P,) int64, forward_caps, backward_caps (S,) int64; out: the child's forward, backward,
// lead (S, K) int32 and codes (S, 2K) int8. Partitions must be valid (every row sums to the
// same U >= 1 within its caps, microbatches first), as the xp code assumes.
#ifndef TIDGAP_JOINT_BREED_CUH
#define TIDGAP_JOINT_BREED_CUH

#include "breed.cuh"

// The joint mutations' numbers, their positions in JOINT_MUTATIONS, and the op codes of
// tidgap.optimize.genome come as -D defines from tidgap.kernels.source.operation_defines().
#if !defined(TIDGAP_JOINT_LEAD_FROM_NEIGHBOUR) || !defined(TIDGAP_NO_OP) || \
    !defined(TIDGAP_MIRRORED_MUTATIONS)
#error "compile with tidgap.kernels.source.operation_defines() (-DTIDGAP_JOINT_<NAME>=i)"
#endif

// The partition mutation (breed.cuh's number) that joint mutation `op` applies, or -1;
// *on_backward: whether it changes the backward partitions.
__host__ __device__ inline int tidgap_partition_mutation(int op, bool* on_backward) {
#define TIDGAP_PARTITION_MUTATION(NAME)                                              \
    if (op == TIDGAP_JOINT_FORWARD_##NAME || op == TIDGAP_JOINT_BACKWARD_##NAME) {   \
        *on_backward = op == TIDGAP_JOINT_BACKWARD_##NAME;                           \
        return TIDGAP_OP_##NAME;                                                     \
    }
    TIDGAP_PARTITION_MUTATION(MOVE_BOUNDARY)
    TIDGAP_PARTITION_MUTATION(SHIFT_BOUNDARY)
    TIDGAP_PARTITION_MUTATION(SPLIT_MICROBATCH)
    TIDGAP_PARTITION_MUTATION(MERGE_MICROBATCHES)
    TIDGAP_PARTITION_MUTATION(COPY_NEIGHBOUR)
    TIDGAP_PARTITION_MUTATION(EQUALISE_STAGE)
#undef TIDGAP_PARTITION_MUTATION
    *on_backward = false;
    return -1;
}

__host__ __device__ inline int tidgap_largest(const int* row, int width) {
    int largest = 0;
    for (int col = 0; col < width; ++col) largest = row[col] > largest ? row[col] : largest;
    return largest;
}

// The JOINT_MUTATIONS position of a mirrored search's mutation number `drawn`: entry `drawn`
// of tidgap.optimize.joint_operators.MIRRORED_MUTATIONS, the set bits of
// TIDGAP_MIRRORED_MUTATIONS (bit i: position i), in increasing order.
__host__ __device__ inline int tidgap_mirrored_mutation(int drawn) {
    int position = 0;
    for (int seen = -1; position < 64; ++position) {
        if ((TIDGAP_MIRRORED_MUTATIONS >> position) & 1ULL) {
            if (++seen == drawn) break;
        }
    }
    return position;
}

// tidgap.optimize.joint_operators.mirror on one child's (S, K) rows: the backward set to
// the forward if every forward microbatch is within its stage's backward cap.
__host__ __device__ inline void tidgap_mirror(const int* forward, int* backward, int stages,
                                              int width, const long long* backward_caps) {
    for (int s = 0; s < stages; ++s) {
        if (tidgap_largest(forward + s * width, width) > backward_caps[s]) return;
    }
    for (int i = 0; i < stages * width; ++i) backward[i] = forward[i];
}

// Order mutation `op` (align_directions and the lead mutations) on one stage of the child's
// (S, K) rows, with uniforms u0 (stage), u1 (position), u2 (value).
__host__ __device__ inline void tidgap_mutate_order(
    int op, double u0, double u1, double u2, int* forward, int* backward, int* lead,
    int stages, int width, const long long* forward_caps, const long long* backward_caps) {
    const int stage = (int)tidgap_uniform_int(u0, 0, stages);
    int* row = lead + stage * width;
    const int step = u2 < 0.5 ? -1 : 1;
    if (op == TIDGAP_JOINT_ALIGN_DIRECTIONS) {
        int* f = forward + stage * width;
        int* b = backward + stage * width;
        bool to_backward = u1 < 0.5 && tidgap_largest(f, width) <= backward_caps[stage];
        bool to_forward = !to_backward && tidgap_largest(b, width) <= forward_caps[stage];
        for (int col = 0; col < width; ++col) {
            if (to_backward) b[col] = f[col];
            if (to_forward) f[col] = b[col];
        }
    } else if (op == TIDGAP_JOINT_NUDGE_LEAD) {
        int backwards = tidgap_count(backward + stage * width, width);
        row[tidgap_uniform_int(u1, 0, tidgap_maxl(backwards, 1))] += step;
    } else if (op == TIDGAP_JOINT_SHIFT_LEADS) {
        int backwards = tidgap_count(backward + stage * width, width);
        int first = (int)tidgap_uniform_int(u1, 0, tidgap_maxl(backwards, 1));
        for (int col = first; col < width; ++col) row[col] += step;
    } else if (op == TIDGAP_JOINT_SET_LEAD) {
        int value = (int)tidgap_uniform_int(u1, 0, stages + 1);
        for (int col = 0; col < width; ++col) row[col] = value;
    } else if (op == TIDGAP_JOINT_FLUSH_STAGE) {
        for (int col = 0; col < width; ++col) row[col] = width;
    } else if (op == TIDGAP_JOINT_LEAD_FROM_NEIGHBOUR) {
        bool last = stage == stages - 1;
        int neighbour = last ? (stage > 0 ? stage - 1 : 0) : stage + 1;
        const int* source = lead + neighbour * width;
        for (int col = 0; col < width; ++col) row[col] = source[col] + (last ? -1 : 1);
    }
}

// A walk along a row of sizes: index i and prefix = the sum of its first i sizes.
struct tidgap_walk {
    int index;
    long long prefix;
};

// Advance `walk` to min{i : prefix[i] >= sample} (tidgap.optimize.order_genes.holder), for
// non-decreasing samples of at most the row's total.
__host__ __device__ inline int tidgap_seek(tidgap_walk* walk, const int* row, int width,
                                           long long sample) {
    while (walk->prefix < sample && walk->index < width) walk->prefix += row[walk->index++];
    return walk->index;
}

// Advance `walk` to index i (non-decreasing, at most width); returns prefix[i].
__host__ __device__ inline long long tidgap_prefix_at(tidgap_walk* walk, const int* row, int i) {
    while (walk->index < i) walk->prefix += row[walk->index++];
    return walk->prefix;
}

// Advance `walk` over op codes to backward j (non-decreasing); returns the forwards before
// it, a[j + 1] (its code sits at a[j + 1] + j). `index` counts the codes read, `prefix` the
// backwards among them.
__host__ __device__ inline int tidgap_forwards_before(tidgap_walk* walk, const signed char* codes,
                                                      int j) {
    while (walk->prefix <= j) walk->prefix += codes[walk->index++] == TIDGAP_BACKWARD_OP;
    return walk->index - 1 - j;
}

// tidgap.optimize.order_genes.canonical on one child: rewrites `lead` (S, K) to the leads of
// the valid order it lowers to (padding 0) and writes that order's codes (S, 2K). Stages
// from the last down (model.md's repair): stage s reads stage s + 1's repaired order back
// from its codes.
__host__ __device__ inline void tidgap_canonical(
    const int* forward, const int* backward, int* lead, signed char* codes, int stages,
    int width) {
    const int length = 2 * width;
    for (int s = stages - 1; s >= 0; --s) {
        const int* f = forward + s * width;
        const int* b = backward + s * width;
        const int forwards = tidgap_count(f, width), backwards = tidgap_count(b, width);
        signed char* row_codes = codes + s * length;
        for (int col = 0; col < length; ++col) {
            row_codes[col] = col < forwards + backwards ? TIDGAP_FORWARD_OP : TIDGAP_NO_OP;
        }
        tidgap_walk own = {0, 0}, least = {0, 0}, waits = {0, 0}, needed = {0, 0}, up = {0, 0};
        long long sample = 0;  // Q[s][k + 1]
        int before = 0;        // a[s][k + 1], raised and made non-decreasing
        for (int k = 0; k < width; ++k) {
            sample += b[k];
            const int owned = tidgap_seek(&own, f, width, sample);
            long long target = sample;
            if (s < stages - 1) {  // rule 2: after the backward below that it waits for
                const int* below = backward + (s + 1) * width;
                int waits_for = tidgap_seek(&waits, below, width, sample);
                int upstream = tidgap_forwards_before(&up, codes + (s + 1) * length, waits_for - 1);
                target = tidgap_maxl(
                    target, tidgap_prefix_at(&needed, forward + (s + 1) * width, upstream));
            }
            int lowered = forwards;  // own + lead clipped to 0..M_s; padding M_s
            if (k < backwards) {
                long long wanted = (long long)owned + lead[s * width + k];
                lowered = (int)(wanted < 0 ? 0 : (wanted > forwards ? forwards : wanted));
            }
            const int fewest = tidgap_seek(&least, f, width, target);  // rules 1 and 2
            before = (int)tidgap_maxl(before, tidgap_maxl(lowered, fewest));
            lead[s * width + k] = before - owned;  // padding: M_s - M_s = 0
            if (k < backwards) row_codes[before + k] = TIDGAP_BACKWARD_OP;
        }
    }
}

// tidgap.optimize.joint_operators.mutate_repaired on child c in place: at most one mutation
// (joint_mutate's three draws, from `mutation_streams`) from the JOINT_MUTATIONS registry, or
// from MIRRORED_MUTATIONS when `mirrored` (then the child is mirrored), then the repair.
// `num_mutations`: the length of the table drawn from. The child's rows: forward, backward,
// lead (S, K); codes (S, 2K) out.
__host__ __device__ inline void tidgap_joint_mutate_child(
    long long c, int stages, int width, const long long* forward_caps,
    const long long* backward_caps, double mutation_rate, int num_mutations, int mirrored,
    const tidgap_u64* mutation_streams, int* child_forward, int* child_backward,
    int* child_lead, signed char* child_codes) {
    int op = tidgap_drawn_mutation(c, num_mutations, mutation_rate, mutation_streams);
    if (op >= 0 && mirrored) op = tidgap_mirrored_mutation(op);
    if (op >= 0) {
        double u0 = tidgap_mutation_uniform(c, 0, mutation_streams);
        double u1 = tidgap_mutation_uniform(c, 1, mutation_streams);
        double u2 = tidgap_mutation_uniform(c, 2, mutation_streams);
        bool on_backward;
        int partition = tidgap_partition_mutation(op, &on_backward);
        if (partition >= 0) {
            tidgap_mutate(partition, u0, u1, u2, on_backward ? child_backward : child_forward,
                          stages, width, on_backward ? backward_caps : forward_caps);
        } else {
            tidgap_mutate_order(op, u0, u1, u2, child_forward, child_backward, child_lead, stages,
                                width, forward_caps, backward_caps);
        }
    }
    if (mirrored) tidgap_mirror(child_forward, child_backward, stages, width, backward_caps);
    tidgap_canonical(child_forward, child_backward, child_lead, child_codes, stages, width);
}

__host__ __device__ inline void tidgap_joint_breed_child(
    long long c, const int* forward, const int* backward, const int* lead,
    const long long* fitness, long long population, int stages, int width,
    const long long* forward_caps, const long long* backward_caps, int tournament_size,
    double crossover_rate, double mutation_rate, int num_mutations, int mirrored,
    const tidgap_u64* streams, int* child_forward, int* child_backward, int* child_lead,
    signed char* child_codes) {
    tidgap_parents parents =
        tidgap_select(c, fitness, population, tournament_size, crossover_rate, streams);
    for (int s = 0; s < stages; ++s) {
        long long parent = tidgap_stage_parent(parents, c, s, stages, streams);
        long long offset = (parent * stages + s) * width;
        for (int col = 0; col < width; ++col) {
            child_forward[s * width + col] = forward[offset + col];
            child_backward[s * width + col] = backward[offset + col];
            child_lead[s * width + col] = lead[offset + col];
        }
    }
    tidgap_joint_mutate_child(c, stages, width, forward_caps, backward_caps, mutation_rate,
                              num_mutations, mirrored, streams + 4, child_forward,
                              child_backward, child_lead, child_codes);
}

#endif  // TIDGAP_JOINT_BREED_CUH
