// Host emulation of the CUDA dialect the kernels use, so `cargo test` runs
// them on a machine without a GPU and compares their bytes with the Rust
// codecs'.
//
// A launch runs blockDim.x real threads (std::thread) that walk the grid's
// blocks together: `__syncthreads()` is a std::barrier across them,
// `__shared__` variables are function statics (one block runs at a time, and
// every thread passes a barrier before the next block), threadIdx/blockIdx
// are thread-locals. Launches are serialized by one mutex.
//
// Not modelled: warp-synchronous code without a barrier (a data race here as
// on Volta and later), warp intrinsics, memory spaces and coalescing,
// several blocks at once, fast-math intrinsics and the GPU's saturating
// float-to-int casts (the kernels avoid both). Built with
// -ffp-contract=off, as NVRTC is given --fmad=false.

#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <math.h>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x, y, z;
};

namespace qf_emu {

using Kernel = void (*)(const void*, void*, unsigned long long, const float*, unsigned long long);

inline std::map<std::string, Kernel>& registry() {
    static std::map<std::string, Kernel> kernels;
    return kernels;
}

struct Registration {
    Registration(const char* name, Kernel kernel) { registry()[name] = kernel; }
};

inline thread_local dim3 thread_index{0, 0, 0};
inline thread_local dim3 block_index{0, 0, 0};
inline dim3 block_dim{1, 1, 1};
inline dim3 grid_dim{1, 1, 1};
inline std::barrier<>* block_barrier = nullptr;

}  // namespace qf_emu

#define threadIdx (qf_emu::thread_index)
#define blockIdx (qf_emu::block_index)
#define blockDim (qf_emu::block_dim)
#define gridDim (qf_emu::grid_dim)
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __constant__
#define __syncthreads() (qf_emu::block_barrier->arrive_and_wait())
#define QF_UNROLL
#define QF_UNROLL_BY(n)

inline unsigned __float_as_uint(float f) {
    unsigned u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

inline double __longlong_as_double(long long u) {
    double d;
    std::memcpy(&d, &u, sizeof d);
    return d;
}

inline unsigned long long atomicMin(unsigned long long* address, unsigned long long value) {
    std::atomic_ref<unsigned long long> target(*address);
    unsigned long long old = target.load();
    while (value < old && !target.compare_exchange_weak(old, value)) {
    }
    return old;
}

#define QF_KERNEL(name)                                                                   \
    static void name(const void*, void*, unsigned long long, const float*, unsigned long long); \
    static const qf_emu::Registration name##_registration(#name, name);                   \
    static void name
