// random.cuh: the counter-based generator of tidgap/optimize/rng.py, as __host__ __device__ code.
//
// Element i of a stream is splitmix64(stream + i); a uniform double is its top 53 bits
// times 2^-53; uniform_int(u, low, high) = low + min(floor(u * (high - low)), high-low-1).
// Bit-for-bit the same as the NumPy/CuPy code (IEEE double multiply, exact conversions).
#ifndef TIDGAP_RANDOM_CUH
#define TIDGAP_RANDOM_CUH

#ifndef __CUDACC__
#define __host__
#define __device__
#endif

typedef unsigned long long tidgap_u64;

__host__ __device__ inline tidgap_u64 tidgap_splitmix64(tidgap_u64 x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

// Uniform double in [0, 1): element `index` of `stream`.
__host__ __device__ inline double tidgap_uniform(tidgap_u64 stream, long long index) {
    return (double)(tidgap_splitmix64(stream + (tidgap_u64)index) >> 11) *
           (1.0 / 9007199254740992.0);
}

// Integer in [low, high) from a uniform u (u >= 0, so truncation is floor).
__host__ __device__ inline long long tidgap_uniform_int(double u, long long low,
                                                        long long high) {
    long long span = high - low;
    long long draw = (long long)(u * (double)span);
    return low + (draw < span - 1 ? draw : span - 1);
}

#endif  // TIDGAP_RANDOM_CUH
