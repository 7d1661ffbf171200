// SPDX-License-Identifier: Apache-2.0
// A CPU emulation of the few CUDA features the tensor-core attention kernels use, so that their
// real source (included by the test after this header) runs here against the fp64 reference:
// one std::thread per CUDA thread of a block, blocks one after another; __syncthreads and every
// warp-wide operation (shuffles, mma.sync m16n8k16, ldmatrix.x4.trans) are barriers of the
// block's or the warp's threads around an exchange of their registers. mma and ldmatrix follow
// the PTX ISA's definitions, with the fragment layout of attention_math.h; cp.async copies at
// once. What it cannot show: timing, real asynchrony (a missing wait), bank conflicts, and a
// misreading of the PTX ISA shared by the kernels and this file. Tests only.
#pragma once

#define TESSEL_CUDA_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "tessel/kernels/cuda/attention/attention_math.h"

namespace tessel::warp_emulation {

struct Exchange {
  uint64_t value[32];
  const void* ptr[32];
  uint32_t a[32][4], b[32][2];
};

// The running block: its shared memory, barriers and exchange areas.
struct Block {
  std::vector<uint4> shared;  // 16-byte aligned
  std::unique_ptr<std::barrier<>> block_barrier;
  std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
  std::vector<Exchange> exchange;
};
inline Block*& current() {
  static Block* block = nullptr;
  return block;
}
inline unsigned char* dynamic_shared() {
  return reinterpret_cast<unsigned char*>(current()->shared.data());
}

}  // namespace tessel::warp_emulation

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 gridDim, blockDim;

namespace tessel::warp_emulation {

inline int lane() {
  return int(threadIdx.x % 32);
}
inline std::barrier<>& warp_barrier() {
  return *current()->warp_barriers[threadIdx.x / 32];
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

// Runs kernel(args...) on grid x block threads, one block at a time.
template <typename... P, typename... A>
void run(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, A... args) {
  const unsigned threads = block.x * block.y * block.z;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        Block b;
        b.shared.assign((shared_bytes + 15) / 16 + 1, uint4{0, 0, 0, 0});
        b.block_barrier = std::make_unique<std::barrier<>>(threads);
        for (unsigned w = 0; w < (threads + 31) / 32; ++w)
          b.warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
        b.exchange.resize((threads + 31) / 32);
        current() = &b;
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t)
          pool.emplace_back([&, t] {
            threadIdx = uint3{t, 0, 0};
            blockIdx = uint3{x, y, z};
            gridDim = grid;
            blockDim = block;
            kernel(args...);
          });
        for (std::thread& t : pool) t.join();
        current() = nullptr;
      }
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
  tessel::warp_emulation::current()->block_barrier->arrive_and_wait();
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
