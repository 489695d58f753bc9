// windowed_lanes.cu run by a warp of real threads, for ThreadSanitizer: 32 std::threads,
// one per lane (threadIdx.x thread-local), __syncwarp a pthread barrier of the 32,
// __any_sync an OR of the lanes' flags between two barriers, the scratch one static array
// that every lane shares, as a block's shared memory. A lane that touches what another
// writes between the same two syncs is a data race that TSan reports (the warp's lanes
// run in no guaranteed order on a GPU either). __any_sync orders no memory, so TSan is told
// to ignore the barriers of the vote: only the kernel's __syncwarp calls order the lanes'
// accesses. With TIDGAP_DROP_SYNC=k the k-th TIDGAP_WARP_SYNC from the start and after
// each TIDGAP_WARP_ANY does nothing (1: the first setup's, each later round's after the
// snapshots, each finish's; 2: the first round's after the snapshots, each later round's
// after the advances, each later setup's; 3: the first round's after the advances, each
// later individual's first after the snapshots): the harness's own check that it sees a
// missing sync.
//
// A program, not a library (TSan wants to be loaded first): `lanes_warp IN OUT`. IN holds,
// each as an int64 count then the elements: forward and backward (int32), order (int8),
// forward_compute, backward_compute, forward_transfer, backward_transfer, tails,
// recompute_forward, recompute_backward, forward_after_backward, backward_after_forward
// (int64), then the int64 scalars population,
// stages, width, length, table_width, priced. OUT gets fitness (P int64) then peak_held
// (P x S int64).
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#ifndef TIDGAP_DROP_SYNC
#define TIDGAP_DROP_SYNC 0
#endif
#ifndef TIDGAP_STAGGER_US
#define TIDGAP_STAGGER_US 20
#endif

struct tidgap_warp_dim3 {
    unsigned int x, y, z;
};
static thread_local tidgap_warp_dim3 threadIdx = {0, 0, 0};
static thread_local int tidgap_syncs_this_round = 0;
static const tidgap_warp_dim3 blockIdx = {0, 0, 0}, gridDim = {1, 1, 1}, blockDim = {32, 1, 1};
static pthread_barrier_t tidgap_warp_barrier;

static thread_local unsigned int tidgap_syncs_seen = 0;

// After each sync the lanes start again staggered, the order reversed from one sync to the
// next: TSan remembers only a few recent accesses per word, so a read that comes long before
// the write it races with may be forgotten; staggered, one lane of every neighbouring pair
// comes after the other's whole phase.
static void tidgap_stagger() {
    const unsigned int place = ++tidgap_syncs_seen % 2 ? threadIdx.x : 31 - threadIdx.x;
    std::this_thread::sleep_for(std::chrono::microseconds(TIDGAP_STAGGER_US * place));
}

static void tidgap_warp_sync() {
    if (++tidgap_syncs_this_round == TIDGAP_DROP_SYNC) return;
    pthread_barrier_wait(&tidgap_warp_barrier);
    tidgap_stagger();
}

// ThreadSanitizer's annotations: synchronisation between Begin and End orders nothing.
extern "C" void AnnotateIgnoreSyncBegin(const char* file, int line);
extern "C" void AnnotateIgnoreSyncEnd(const char* file, int line);

// The vote: relaxed atomic flags between two barriers that TSan is told to ignore.
static int tidgap_warp_any(int flag) {
    static std::atomic<int> flags[32];
    tidgap_syncs_this_round = 0;
    AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
    flags[threadIdx.x].store(flag, std::memory_order_relaxed);
    pthread_barrier_wait(&tidgap_warp_barrier);
    int any = 0;
    for (auto& each : flags) any |= each.load(std::memory_order_relaxed);
    pthread_barrier_wait(&tidgap_warp_barrier);
    AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
    tidgap_stagger();
    return any;
}

#define __global__
#define TIDGAP_WARP_SYNC() tidgap_warp_sync()
#define TIDGAP_WARP_ANY(flag) tidgap_warp_any(flag)
#define TIDGAP_HOST_GROUPS (32 / TIDGAP_GROUP)
#include "windowed_lanes.cu"

template <typename T>
static bool read_array(std::FILE* in, std::vector<T>& into) {
    long long count = 0;
    if (std::fread(&count, sizeof count, 1, in) != 1 || count < 0) return false;
    into.resize(count);
    return std::fread(into.data(), sizeof(T), count, in) == static_cast<size_t>(count);
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    std::FILE* in = std::fopen(argv[1], "rb");
    if (in == nullptr) return 2;
    std::vector<int> forward, backward;
    std::vector<signed char> order;
    std::vector<tidgap_i64> tables[9];
    bool ok = read_array(in, forward) && read_array(in, backward) && read_array(in, order);
    for (auto& table : tables) ok = ok && read_array(in, table);
    long long scalars[6];
    ok = ok && std::fread(scalars, sizeof scalars[0], 6, in) == 6;
    std::fclose(in);
    if (!ok) return 2;
    const long long population = scalars[0];
    const int stages = static_cast<int>(scalars[1]);
    std::vector<tidgap_i64> fitness(population), peak_held(population * stages);
    pthread_barrier_init(&tidgap_warp_barrier, nullptr, 32);
    std::vector<std::thread> lanes;
    for (unsigned int lane = 0; lane < 32; ++lane) {
        lanes.emplace_back([&, lane] {
            threadIdx.x = lane;
            tidgap_windowed_lanes(forward.data(), backward.data(), order.data(), fitness.data(),
                                  peak_held.data(), population, stages,
                                  static_cast<int>(scalars[2]), static_cast<int>(scalars[3]),
                                  tables[0].data(), tables[1].data(), tables[2].data(),
                                  tables[3].data(), tables[4].data(),
                                  static_cast<int>(scalars[4]), tables[5].data(),
                                  tables[6].data(), tables[7].data(), tables[8].data(),
                                  static_cast<int>(scalars[5]));
        });
    }
    for (auto& lane : lanes) lane.join();
    pthread_barrier_destroy(&tidgap_warp_barrier);
    std::FILE* out = std::fopen(argv[2], "wb");
    if (out == nullptr) return 2;
    std::fwrite(fitness.data(), sizeof(tidgap_i64), fitness.size(), out);
    std::fwrite(peak_held.data(), sizeof(tidgap_i64), peak_held.size(), out);
    return std::fclose(out) == 0 ? 0 : 2;
}
