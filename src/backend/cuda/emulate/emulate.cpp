// The kernels compiled for the host (see host_prelude.h), launched by name
// from Rust with the grid the CUDA backend would use.

#include "host_prelude.h"

#include "../kernels/common.cuh"
#include "iq_grids.cuh"
#include "../kernels/search.cuh"
#include "../kernels/float.cu"
#include "../kernels/legacy.cu"
#include "../kernels/kquants.cu"
#include "../kernels/ternary.cu"
#include "../kernels/iq4.cu"
#include "../kernels/fp4.cu"
#include "../kernels/iq_grid.cu"

namespace {
std::mutex launches;
}

// Runs kernel `name` over `grid` blocks of `threads` threads; 0 on success,
// -1 for an unknown kernel.
extern "C" int qf_emulate_launch(const char* name, unsigned grid, unsigned threads, const void* source,
                                 void* destination, unsigned long long n, const float* importance,
                                 unsigned long long n_per_row) {
    auto found = qf_emu::registry().find(name);
    if (found == qf_emu::registry().end()) return -1;
    qf_emu::Kernel kernel = found->second;
    std::lock_guard<std::mutex> lock(launches);
    std::barrier<> barrier(threads);
    qf_emu::block_barrier = &barrier;
    qf_emu::block_dim = dim3{threads, 1, 1};
    qf_emu::grid_dim = dim3{grid, 1, 1};
    std::vector<std::thread> workers;
    workers.reserve(threads);
    for (unsigned t = 0; t < threads; t++) {
        workers.emplace_back([=, &barrier] {
            qf_emu::thread_index = dim3{t, 0, 0};
            for (unsigned b = 0; b < grid; b++) {
                qf_emu::block_index = dim3{b, 0, 0};
                kernel(source, destination, n, importance, n_per_row);
                barrier.arrive_and_wait();
            }
        });
    }
    for (auto& worker : workers) worker.join();
    qf_emu::block_barrier = nullptr;
    return 0;
}
