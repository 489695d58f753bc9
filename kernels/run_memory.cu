// run_memory.cu: what each stage holds as `tidgap run` runs it, for a whole population.
//
// The GPU twin of tidgap/fallback_cpu/run_memory_numba.py (the same walks, the same
// float64 sums of whole numbers, so the same int64 results): held[p][s] in `fine` units
// (tidgap.optimize.run_memory.FINE, a power of two) of stage s's activation bytes, rounded
// up (more than the batch's where a stage holds more): a recomputing stage (some backward
// boundary is not a forward one) counts its received input and gradient chunks, its
// forwards' draws and one backward's working set; a stage that stores its graphs its
// alive graphs, the task's tensors and the received chunks it keeps past its last forward
// and backward. A stage with no positive activation bytes keeps the model's peak samples
// (peaks[p][s] * fine).
// Thread-to-work mapping: one thread per (individual, stage), w = p * S + s, grid-stride
// loop; each thread builds four prefix sums of K + 1 entries in local memory (its stage's
// forwards and backwards, the upstream stage's forwards, the downstream stage's backwards;
// its own on the first / last stage), flat after a row's last size.
// Arguments, in order:
//   forward, backward (P, S, K) int32 sizes in units, lead (P, S, K) int32 canonical leads,
//   peaks (P, S) int64, figures (9, S) float64 (rows: input, output, draws, backward,
//   task, graph sample, graph chunk, backward chunk, draw views: RunMemory.figures as it
//   is, the row constants of tidgap/optimize/run_memory.py in order), activation (S,)
//   float64, held (P, S) int64 out, population P, stages S, width K, unit, fine.
#ifndef __CUDACC__
#define __host__
#define __device__
#endif

#ifndef TIDGAP_MAX_K
#define TIDGAP_MAX_K 64
#endif

enum {
    RM_INPUT, RM_OUTPUT, RM_DRAWS, RM_BACKWARD, RM_TASK, RM_SAMPLE, RM_CHUNK, RM_WORK_CHUNK,
    RM_DRAW_VIEWS
};

// The chunk of `prefix` holding `sample`, from `index` on: prefix[i] <= sample < prefix[i+1].
__host__ __device__ inline int rm_start(const long long* prefix, int index, long long sample) {
    while (prefix[index + 1] <= sample) ++index;
    return index;
}

// min{i : prefix[i] >= sample}, walking from `index` either way.
__host__ __device__ inline int rm_holder(const long long* prefix, int index, long long sample) {
    while (prefix[index] < sample) ++index;
    while (index > 0 && prefix[index - 1] >= sample) --index;
    return index;
}

// prefix[0..K] of `row` (K sizes) up to its first zero, then flat; returns the sizes before it.
__host__ __device__ inline int rm_prefix(const int* row, int width, long long* prefix) {
    int count = 0;
    prefix[0] = 0;
    while (count < width && row[count] != 0) {
        prefix[count + 1] = prefix[count] + row[count];
        ++count;
    }
    for (int k = count + 1; k <= width; ++k) prefix[k] = prefix[count];
    return count;
}

__host__ __device__ inline double rm_max(double a, double b) { return a > b ? a : b; }

// ceil(x) for 0 <= x < 2^63, without a math header (NVRTC has none).
__host__ __device__ inline long long rm_ceil(double x) {
    const long long whole = (long long)x;
    return (double)whole < x ? whole + 1 : whole;
}

// The most bytes recomputing stage s holds at an op's end.
__host__ __device__ inline double rm_recomputing(
    const long long* fp, int m, const long long* bp, int n, const long long* up,
    const long long* down, const int* lead, const double* figures, int stages, int s,
    double unit) {
    const double received_input = figures[RM_INPUT * stages + s];
    const double sent = figures[RM_OUTPUT * stages + s];
    const double drawn = figures[RM_DRAWS * stages + s];
    int own = 0, draw_chunk = 0, input_chunk = 0, input_end = 0;
    int gradient_chunk = 0, gradient_end = 0, previous = -1;
    long long earlier = 0;
    double peak = 0.0;
    for (int k = 0; k < n; ++k) {
        const long long lo = bp[k], hi = bp[k + 1];
        while (fp[own] < hi) ++own;
        const int before = own + lead[k] < m ? own + lead[k] : m;
        const long long end = fp[before];
        draw_chunk = rm_start(fp, draw_chunk, lo);
        input_chunk = rm_start(up, input_chunk, lo);
        gradient_chunk = rm_start(down, gradient_chunk, lo);
        input_end = rm_holder(up, input_end, end);
        gradient_end = rm_holder(down, gradient_end, hi);
        const double kept = received_input * (double)(up[input_end] - up[input_chunk]) +
                            drawn * (double)(end - fp[draw_chunk]);
        double work = figures[RM_BACKWARD * stages + s];
        if (up[input_chunk + 1] >= hi) work -= received_input;
        if (fp[draw_chunk + 1] >= hi) work -= figures[RM_DRAW_VIEWS * stages + s];
        const double gradients = (double)(down[gradient_end] - down[gradient_chunk]);
        double at_backward = (kept + sent * gradients + (double)(hi - lo) * work) * unit +
                             figures[RM_TASK * stages + s];
        at_backward += figures[RM_WORK_CHUNK * stages + s];
        peak = rm_max(peak, at_backward);
        if (before > previous) {
            const long long waiting = earlier - down[gradient_chunk];
            peak = rm_max(peak, (kept + sent * (double)(waiting > 0 ? waiting : 0)) * unit);
        }
        earlier = down[gradient_end];
        previous = before;
    }
    return peak;
}

// What stage s, storing its graphs, holds in fine units of `activation`, rounded up.
__host__ __device__ inline long long rm_stored(
    const long long* fp, int m, const long long* bp, int n, const long long* up,
    const long long* down, const int* lead, const double* figures, int stages, int s,
    double unit, double activation, double fine) {
    int j = 0, own = 0, before = m;
    if (n > 0) {
        while (fp[own] < bp[1]) ++own;
        before = own + lead[0] < m ? own + lead[0] : m;
    }
    int input_end = 0, input_chunk = 0, gradient_end = 0, gradient_chunk = 0, done = 0;
    long long best = 0;
    for (int k = 0; k < m; ++k) {
        while (j < n && before <= k) {
            ++j;
            if (j < n) {
                while (fp[own] < bp[j + 1]) ++own;
                before = own + lead[j] < m ? own + lead[j] : m;
            }
        }
        const long long end = fp[k + 1], last = bp[j];
        input_end = rm_holder(up, input_end, end);
        long long kept_input = 0;
        if (up[input_end] > end) {
            input_chunk = rm_start(up, input_chunk, end);
            kept_input = up[input_end] - up[input_chunk];
        }
        gradient_end = rm_holder(down, gradient_end, last);
        long long kept_gradients = 0;
        if (down[gradient_end] > last) {
            gradient_chunk = rm_start(down, gradient_chunk, last);
            kept_gradients = down[gradient_end] - down[gradient_chunk];
        }
        done = rm_holder(fp, done, last);
        const double graphs = figures[RM_SAMPLE * stages + s] * (double)(end - last);
        const double kept = figures[RM_INPUT * stages + s] * (double)kept_input +
                            figures[RM_OUTPUT * stages + s] * (double)kept_gradients;
        double held = (graphs + kept) * unit;
        held += figures[RM_CHUNK * stages + s] * (double)(k + 1 - done);
        held += figures[RM_TASK * stages + s];
        const long long units = rm_ceil(held * fine / activation);
        best = units > best ? units : best;
    }
    return best;
}

// Whether some backward boundary bp[1..n] is not a forward boundary.
__host__ __device__ inline bool rm_recomputes(const long long* fp, const long long* bp, int n) {
    int i = 0;
    for (int k = 1; k <= n; ++k) {
        while (fp[i] < bp[k]) ++i;
        if (fp[i] != bp[k]) return true;
    }
    return false;
}

extern "C" __global__ void tidgap_run_memory(
    const int* __restrict__ forward, const int* __restrict__ backward,
    const int* __restrict__ lead, const long long* __restrict__ peaks,
    const double* __restrict__ figures, const double* __restrict__ activation,
    long long* __restrict__ held, long long population, int stages, int width, double unit,
    double fine) {
    long long fp[TIDGAP_MAX_K + 1], bp[TIDGAP_MAX_K + 1];
    long long up[TIDGAP_MAX_K + 1], down[TIDGAP_MAX_K + 1];
    const long long work = population * stages;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x; w < work; w += step) {
        const int s = (int)(w % stages);
        const int* row = forward + w * width;
        held[w] = peaks[w] * (long long)fine;
        if (activation[s] <= 0) continue;
        const int m = rm_prefix(row, width, fp);
        const int n = rm_prefix(backward + w * width, width, bp);
        rm_prefix(s > 0 ? row - width : row, width, up);
        rm_prefix(backward + (s < stages - 1 ? w + 1 : w) * width, width, down);
        const int* leads = lead + w * width;
        if (rm_recomputes(fp, bp, n)) {
            const double memory = rm_recomputing(
                fp, m, bp, n, up, down, leads, figures, stages, s, unit);
            held[w] = rm_ceil(memory * fine / activation[s]);
        } else {
            held[w] = rm_stored(
                fp, m, bp, n, up, down, leads, figures, stages, s, unit, activation[s], fine);
        }
    }
}
