// breed.cuh: one child of a generation, as __host__ __device__ code.
//
// Computes child c of tidgap.optimize.operators.breed exactly: two tournaments over `fitness`,
// crossover of whole stages, then at most one mutation of one stage, with the same draws.
// `streams` holds the seven stream keys in draw order (BREED_DRAWS): tournament 1,
// tournament 2, crossover (c * S + s), use-crossover (c), then the mutation's three
// (MUTATE_DRAWS, from `streams + 4`): operator (c), mutate-or-not (c), uniforms (c * 3 + j).
// Arrays (row-major): genes (P, S, K) int32 parents, fitness (P,) int64, caps (S,) int64,
// child (S, K) int32 out. The mutation order is the registry's: move, shift, split, merge,
// copy neighbour, equalise.
#ifndef TIDGAP_BREED_CUH
#define TIDGAP_BREED_CUH

#include "random.cuh"

__host__ __device__ inline long long tidgap_tournament(
    tidgap_u64 stream, long long child, int size, const long long* fitness, long long population) {
    long long best = -1;
    for (int j = 0; j < size; ++j) {
        long long entrant = tidgap_uniform_int(
            tidgap_uniform(stream, child * size + j), 0, population);
        if (best < 0 || fitness[entrant] < fitness[best]) best = entrant;
    }
    return best;
}

__host__ __device__ inline long long tidgap_min(long long a, long long b) { return a < b ? a : b; }
__host__ __device__ inline long long tidgap_maxl(long long a, long long b) { return a > b ? a : b; }

__host__ __device__ inline int tidgap_count(const int* row, int width) {
    int count = 0;
    while (count < width && row[count] > 0) ++count;
    return count;
}

// The mutations' numbers, their positions in tidgap.optimize.operators.MUTATIONS, come as
// -DTIDGAP_OP_<NAME>=i from tidgap.kernels.source.operation_defines().
#ifndef TIDGAP_OP_EQUALISE_STAGE
#error "compile with tidgap.kernels.source.operation_defines() (-DTIDGAP_OP_<NAME>=i)"
#endif

// Mutation `op` on one stage of `child` (S, K), with uniforms u0 (stage), u1, u2.
__host__ __device__ inline void tidgap_mutate(
    int op, double u0, double u1, double u2, int* child, int stages, int width,
    const long long* caps) {
    int stage = (int)tidgap_uniform_int(u0, 0, stages);
    int* row = child + stage * width;
    long long cap = caps[stage];
    int count = tidgap_count(row, width);
    if (op == TIDGAP_OP_MOVE_BOUNDARY || op == TIDGAP_OP_SHIFT_BOUNDARY ||
        op == TIDGAP_OP_MERGE_MICROBATCHES) {  // boundary between k and k + 1
        int k = (int)tidgap_uniform_int(u1, 0, tidgap_maxl(count - 1, 1));
        long long left = row[k];
        long long right = row[k + 1 < width ? k + 1 : width - 1];
        long long total = left + right;
        if (op == TIDGAP_OP_MERGE_MICROBATCHES) {
            if (count >= 2 && total <= cap) {
                row[k] = (int)total;
                for (int col = k + 1; col < width - 1; ++col) row[col] = row[col + 1];
                row[width - 1] = 0;
            }
            return;
        }
        long long low = tidgap_maxl(1, total - cap);
        long long high_raw = tidgap_min(cap, total - 1);
        long long high = tidgap_maxl(high_raw, low);
        long long new_left;
        if (op == TIDGAP_OP_SHIFT_BOUNDARY) {  // one unit
            new_left = left + (u2 < 0.5 ? -1 : 1);
            new_left = new_left < low ? low : (new_left > high ? high : new_left);
        } else {  // move to a random feasible point
            new_left = tidgap_uniform_int(u2, low, high + 1);
        }
        if (count >= 2 && high_raw >= low) {
            row[k] = (int)new_left;
            row[k + 1] = (int)(total - new_left);
        }
    } else if (op == TIDGAP_OP_SPLIT_MICROBATCH) {
        int k = (int)tidgap_uniform_int(u1, 0, tidgap_maxl(count, 1));
        long long size = row[k];
        long long head = tidgap_uniform_int(u2, 1, tidgap_maxl(size, 2));
        if (size >= 2 && count < width) {
            for (int col = width - 1; col > k; --col) row[col] = row[col - 1];
            row[k] = (int)head;
            row[k + 1] = (int)(size - head);
        }
    } else if (op == TIDGAP_OP_COPY_NEIGHBOUR) {
        int neighbour = stage + (u1 < 0.5 ? -1 : 1);
        neighbour = neighbour < 0 ? 0 : (neighbour > stages - 1 ? stages - 1 : neighbour);
        const int* borrowed = child + neighbour * width;
        long long largest = 0;
        for (int col = 0; col < width; ++col) largest = tidgap_maxl(largest, borrowed[col]);
        if (largest <= cap && neighbour != stage) {
            for (int col = 0; col < width; ++col) row[col] = borrowed[col];
        }
    } else if (op == TIDGAP_OP_EQUALISE_STAGE) {
        long long total = 0;
        for (int col = 0; col < width; ++col) total += row[col];
        long long fewest = (total + cap - 1) / cap;
        long long m = tidgap_uniform_int(
            u1, fewest, tidgap_maxl(fewest, tidgap_min(width, total)) + 1);
        for (int col = 0; col < width; ++col) {
            row[col] = col < m ? (int)(total / m + (col < total % m ? 1 : 0)) : 0;
        }
    }
}

// Child c's parents: the winners of the two tournaments (streams 0 and 1), and whether it
// crosses them (stream 3, index c) or copies the first.
struct tidgap_parents {
    long long first, second;
    bool use_cross;
};

__host__ __device__ inline tidgap_parents tidgap_select(
    long long c, const long long* fitness, long long population, int tournament_size,
    double crossover_rate, const tidgap_u64* streams) {
    tidgap_parents parents;
    parents.first = tidgap_tournament(streams[0], c, tournament_size, fitness, population);
    parents.second = tidgap_tournament(streams[1], c, tournament_size, fitness, population);
    parents.use_cross = tidgap_uniform(streams[3], c) < crossover_rate;
    return parents;
}

// The parent child c takes stage s from (stream 2, index c * S + s).
__host__ __device__ inline long long tidgap_stage_parent(
    const tidgap_parents& parents, long long c, int s, int stages, const tidgap_u64* streams) {
    bool take_first = tidgap_uniform(streams[2], c * stages + s) < 0.5;
    return (parents.use_cross && !take_first) ? parents.second : parents.first;
}

// Child c's mutation, a registry position, or -1 for none (`mutation_streams` 0 and 1,
// index c: tidgap.optimize.operators.mutate's first two draws).
__host__ __device__ inline int tidgap_drawn_mutation(
    long long c, int num_mutations, double mutation_rate, const tidgap_u64* mutation_streams) {
    int op = (int)tidgap_uniform_int(tidgap_uniform(mutation_streams[0], c), 0, num_mutations);
    return tidgap_uniform(mutation_streams[1], c) < mutation_rate ? op : -1;
}

// Uniform j (0: stage, 1: position, 2: value) of child c's mutation (`mutation_streams` 2,
// index c * 3 + j).
__host__ __device__ inline double tidgap_mutation_uniform(
    long long c, int j, const tidgap_u64* mutation_streams) {
    return tidgap_uniform(mutation_streams[2], c * 3 + j);
}

__host__ __device__ inline void tidgap_breed_child(
    long long c, const int* genes, const long long* fitness, long long population,
    int stages, int width, const long long* caps, int tournament_size,
    double crossover_rate, double mutation_rate, int num_mutations,
    const tidgap_u64* streams, int* child) {
    tidgap_parents parents =
        tidgap_select(c, fitness, population, tournament_size, crossover_rate, streams);
    for (int s = 0; s < stages; ++s) {
        long long parent = tidgap_stage_parent(parents, c, s, stages, streams);
        const int* source = genes + (parent * stages + s) * width;
        for (int col = 0; col < width; ++col) child[s * width + col] = source[col];
    }
    const tidgap_u64* mutation_streams = streams + 4;
    int op = tidgap_drawn_mutation(c, num_mutations, mutation_rate, mutation_streams);
    if (op >= 0) {
        tidgap_mutate(op, tidgap_mutation_uniform(c, 0, mutation_streams),
                      tidgap_mutation_uniform(c, 1, mutation_streams),
                      tidgap_mutation_uniform(c, 2, mutation_streams), child, stages, width, caps);
    }
}

#endif  // TIDGAP_BREED_CUH
