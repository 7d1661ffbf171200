// SPDX-License-Identifier: Apache-2.0
// A CPU emulation of the few CUDA features the tensor-core attention kernels use, so that their
// real source (included by the test after this header) runs here against the fp64 reference:
// one fiber (ucontext) per CUDA thread of a block, all on the calling thread, blocks one after
// another; __syncthreads and every warp-wide operation (shuffles, mma.sync m16n8k16,
// ldmatrix.x4.trans) are barriers of the block's or the warp's threads around an exchange of their
// registers. Fibers, not OS threads: a barrier is then a switch of stacks, not a futex wake of
// up to 256 threads on a few cores (the OS-thread emulation spent 60% of its time in the kernel).
// mma and ldmatrix follow the PTX ISA's definitions, with the fragment layout of attention_math.h;
// cp.async copies at once. What it cannot show: timing, real asynchrony (a missing wait), bank
// conflicts, and a misreading of the PTX ISA shared by the kernels and this file. Tests only.
#pragma once

#define TESSEL_CUDA_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <vector>

#include "tessel/kernels/cuda/attention/attention_math.h"

namespace tessel::warp_emulation {

struct Exchange {
  uint64_t value[32];
  const void* ptr[32];
  uint32_t a[32][4], b[32][2];
};

// A barrier of `count` fibers: the last to arrive opens it (a new generation), the others wait.
struct Barrier {
  int count = 0, arrived = 0;
  uint64_t generation = 0;
  void arrive_and_wait();
};

// One CUDA thread: its context, stack and the barrier generation it waits for.
struct Fiber {
  ucontext_t context;
  uint3 thread_idx;
  const Barrier* waiting = nullptr;
  uint64_t wait_generation = 0;
  bool done = false;
};

// The running block: its shared memory, barriers, exchange areas and fibers.
struct Block {
  std::vector<uint4> shared;  // 16-byte aligned
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<Exchange> exchange;
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  Fiber* running = nullptr;
};
inline Block*& current() {
  static Block* block = nullptr;
  return block;
}
inline unsigned char* dynamic_shared() {
  return reinterpret_cast<unsigned char*>(current()->shared.data());
}

inline void Barrier::arrive_and_wait() {
  if (++arrived == count) {
    arrived = 0;
    ++generation;
    return;
  }
  Block& b = *current();
  Fiber& me = *b.running;
  me.waiting = this;
  me.wait_generation = generation;
  swapcontext(&me.context, &b.scheduler);
}

}  // namespace tessel::warp_emulation

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 gridDim, blockDim;

namespace tessel::warp_emulation {

inline int lane() {
  return int(threadIdx.x % 32);
}
inline Barrier& warp_barrier() {
  return current()->warp_barriers[threadIdx.x / 32];
}
inline Exchange& warp_exchange() {
  return current()->exchange[threadIdx.x / 32];
}

template <typename T>
T shuffle(T v, int src_lane) {
  static_assert(sizeof(T) <= 8);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  warp_exchange().value[lane()] = bits;
  warp_barrier().arrive_and_wait();
  bits = warp_exchange().value[src_lane & 31];
  warp_barrier().arrive_and_wait();
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// Fiber stacks, mapped once and reused: pages a fiber never touches cost nothing.
struct Stacks {
  static constexpr size_t kBytes = size_t(256) << 10;
  unsigned char* base = nullptr;
  size_t count = 0;
  explicit Stacks(size_t n) : count(n) {
    void* p = mmap(nullptr, n * kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "warp emulation: cannot map %zu fiber stacks\n", n);
      std::abort();
    }
    base = static_cast<unsigned char*>(p);
  }
  ~Stacks() { munmap(base, count * kBytes); }
  Stacks(const Stacks&) = delete;
  Stacks& operator=(const Stacks&) = delete;
};

// Runs kernel(args...) on grid x block threads, one block at a time: every fiber runs until it
// waits at a barrier or ends; a pass in which none can run while some have not ended is a
// deadlock (a barrier not every thread reaches), reported rather than hung.
template <typename... P, typename... A>
void run(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, A... args) {
  const unsigned threads = block.x * block.y * block.z;
  Stacks stacks(threads);
  struct Launch {
    void (*kernel)(P...);
    std::tuple<A...> args;
  } launch{kernel, std::tuple<A...>(args...)};
  static thread_local Launch* active = nullptr;
  active = &launch;
  auto entry = +[] {
    std::apply([](auto... a) { active->kernel(a...); }, active->args);
    current()->running->done = true;
  };
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        Block b;
        b.shared.assign((shared_bytes + 15) / 16 + 1, uint4{0, 0, 0, 0});
        b.block_barrier.count = int(threads);
        b.warp_barriers.resize((threads + 31) / 32);
        for (Barrier& w : b.warp_barriers) w.count = 32;
        b.exchange.resize((threads + 31) / 32);
        b.fibers.resize(threads);
        current() = &b;
        blockIdx = uint3{x, y, z};
        gridDim = grid;
        blockDim = block;
        for (unsigned t = 0; t < threads; ++t) {
          Fiber& f = b.fibers[t];
          f.thread_idx = uint3{t, 0, 0};
          getcontext(&f.context);
          f.context.uc_stack.ss_sp = stacks.base + t * Stacks::kBytes;
          f.context.uc_stack.ss_size = Stacks::kBytes;
          f.context.uc_link = &b.scheduler;
          makecontext(&f.context, entry, 0);
        }
        for (unsigned left = threads; left > 0;) {
          bool progressed = false;
          for (Fiber& f : b.fibers) {
            if (f.done || (f.waiting && f.waiting->generation == f.wait_generation)) continue;
            f.waiting = nullptr;
            b.running = &f;
            threadIdx = f.thread_idx;
            swapcontext(&b.scheduler, &f.context);
            progressed = true;
            if (f.done) --left;
          }
          if (!progressed) {
            std::fprintf(stderr, "warp emulation: deadlock, %u threads wait at a barrier\n", left);
            std::abort();
          }
        }
        current() = nullptr;
      }
  active = nullptr;
}

template <typename... P>
auto launcher(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes) {
  return [=](auto... args) { run(kernel, grid, block, shared_bytes, args...); };
}

}  // namespace tessel::warp_emulation

#define __launch_bounds__(...)
#undef __shared__
#define __shared__ static
#define TESSEL_DYNAMIC_SHARED(name) unsigned char* name = ::tessel::warp_emulation::dynamic_shared()
#define TESSEL_LAUNCH(grid, block, shared, stream, ...) \
  ::tessel::warp_emulation::launcher(__VA_ARGS__, dim3(grid), dim3(block), size_t(shared))

inline void __syncthreads() {
  tessel::warp_emulation::current()->block_barrier.arrive_and_wait();
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  tessel::warp_emulation::warp_barrier().arrive_and_wait();
}
template <typename T>
T __shfl_sync(unsigned, T v, int src) {
  return tessel::warp_emulation::shuffle(v, src);
}
template <typename T>
T __shfl_xor_sync(unsigned, T v, int mask) {
  return tessel::warp_emulation::shuffle(v, tessel::warp_emulation::lane() ^ mask);
}
inline float atomicAdd(float* p, float v) {
  return std::atomic_ref<float>(*p).fetch_add(v);
}

namespace tessel::kernels::cuda::detail {

inline void cp_async16(void* dst, const void* src, bool valid) {
  if (valid)
    std::memcpy(dst, src, 16);
  else
    std::memset(dst, 0, 16);
}
inline void cp_async_commit() {}
template <int N>
void cp_async_wait() {}
inline uint32_t lds32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

template <typename T>
uint32_t pack2(float lo, float hi);
template <>
inline uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t out;
  std::memcpy(&out, &v, 4);
  return out;
}
template <>
inline uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  uint32_t out;
  std::memcpy(&out, &v, 4);
  return out;
}
template <typename T>
float unpack(uint32_t reg, int half) {
  const uint16_t bits = uint16_t(half ? reg >> 16 : reg & 0xffffu);
  T x;
  std::memcpy(static_cast<void*>(&x), &bits, 2);
  return float(x);
}

// D = A B + C for the warp: every lane's A and B registers are gathered into the full 16 x 16 and
// 16 x 8 matrices through the fragment maps, then each lane computes its four C elements.
template <typename T>
void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  using namespace tessel::warp_emulation;
  Exchange& ex = warp_exchange();
  const int me = lane();
  for (int r = 0; r < 4; ++r) ex.a[me][r] = a[r];
  ex.b[me][0] = b0;
  ex.b[me][1] = b1;
  warp_barrier().arrive_and_wait();
  float am[16][16], bm[16][8];
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h)
        am[mma_a_row(l, r)][mma_a_col(l, r) + h] = unpack<T>(ex.a[l][r], h);
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h) bm[mma_b_k(l, r) + h][mma_b_n(l)] = unpack<T>(ex.b[l][r], h);
  }
  warp_barrier().arrive_and_wait();
  for (int e = 0; e < 4; ++e) {
    float sum = 0.f;
    for (int k = 0; k < 16; ++k) sum += am[mma_c_row(me, e)][k] * bm[k][mma_c_col(me, e)];
    c[e] += sum;
  }
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: lane 8 m + i gives the address of row i of
// matrix m; with .trans, lane l's register m holds elements (2 (l % 4), l / 4) and
// (2 (l % 4) + 1, l / 4) of matrix m.
inline void ldmatrix_x4_trans(uint32_t* r, const void* row_addr) {
  using namespace tessel::warp_emulation;
  Exchange& ex = warp_exchange();
  const int me = lane();
  ex.ptr[me] = row_addr;
  warp_barrier().arrive_and_wait();
  for (int m = 0; m < 4; ++m) {
    const auto* lo = static_cast<const uint16_t*>(ex.ptr[8 * m + 2 * (me % 4)]);
    const auto* hi = static_cast<const uint16_t*>(ex.ptr[8 * m + 2 * (me % 4) + 1]);
    r[m] = uint32_t(lo[me / 4]) | (uint32_t(hi[me / 4]) << 16);
  }
  warp_barrier().arrive_and_wait();
}

}  // namespace tessel::kernels::cuda::detail
