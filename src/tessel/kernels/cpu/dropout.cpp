// SPDX-License-Identifier: Apache-2.0
// CPU dropout with the counter-based mask keep_i = uniform_at(seed, offset, i) >= p, so backward
// regenerates it from (seed, offset). Each Philox4x32-10 block (Salmon et al. 2011) is computed
// once for its four elements, 16 blocks at a time in SIMD lanes.
#include <cmath>
#include <cstring>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/half_kernels.h"
#include "tessel/kernels/cpu/loops.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

constexpr int kBlocks = 16;          // Philox blocks per batch
constexpr int kBatch = 4 * kBlocks;  // stream elements per batch

// bits[e] = top 24 bits of the Philox word of stream element 4 * first_block + e, e < kBatch.
// This is tessel::uniform_at's mapping (block n / 4 under key seed, word n % 4), which returns
// exactly bits * 2^-24; the kernel tests compare the masks through the reference backend.
void philox_bits(uint64_t first_block, uint64_t seed, uint32_t* bits) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t w[4][kBlocks];
#pragma omp simd
  for (int j = 0; j < kBlocks; ++j) {
    uint64_t counter = first_block + uint64_t(j);
    uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      uint32_t hi0 = uint32_t((uint64_t(kMul0) * c0) >> 32);
      uint32_t hi1 = uint32_t((uint64_t(kMul1) * c2) >> 32);
      uint32_t lo0 = kMul0 * c0, lo1 = kMul1 * c2;
      c0 = hi1 ^ c1 ^ k0;
      c2 = hi0 ^ c3 ^ k1;
      c1 = lo1;
      c3 = lo0;
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    w[0][j] = c0;
    w[1][j] = c1;
    w[2][j] = c2;
    w[3][j] = c3;
  }
  for (int j = 0; j < kBlocks; ++j)
    for (int lane = 0; lane < 4; ++lane) bits[4 * j + lane] = w[lane][j] >> 8;
}

// y[j] = x[j] * scale where bits[j] >= threshold, else 0.
template <typename T>
void apply_mask(const T* x, const uint32_t* bits, T* y, int64_t len, uint32_t threshold, T scale) {
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) y[j] = x[j] * (bits[j] >= threshold ? scale : T(0));
}

template <typename T>
void dropout_impl(const T* x, T* y, int64_t n, double p, uint64_t seed, uint64_t offset) {
  const T scale = T(1.0 / (1.0 - p));
  // uniform * 2^24 is the integer `bits`, so uniform >= p exactly when bits >= ceil(p * 2^24).
  const uint32_t threshold = uint32_t(std::ceil(p * 16777216.0));
  parallel_for(0, n, cpu::kElementGrain, [=](int64_t lo, int64_t hi) {
    uint32_t bits[kBatch];
    int64_t i = lo;
    while (i < hi) {
      // The batch holding stream element offset + i, and the part of [i, hi) it covers.
      uint64_t first_block = (offset + uint64_t(i)) / 4;
      int64_t start = int64_t(offset + uint64_t(i) - 4 * first_block);
      int64_t len = std::min<int64_t>(kBatch - start, hi - i);
      philox_bits(first_block, seed, bits);
      apply_mask(x + i, bits + start, y + i, len, threshold, scale);
      i += len;
    }
  });
}

}  // namespace

void CpuBackend::dropout(const Tensor& x, Tensor& y, double p, uint64_t seed, uint64_t offset) {
  validate_dropout(*this, x, y, p);
  if (cpu::is_half(x.dtype())) return cpu::half_dropout(*this, x, y, p, seed, offset);
  if (x.numel() == 0) return;
  if (p == 0.0) {  // every element kept, scale 1
    if (y.data_ptr() != x.data_ptr()) std::memcpy(y.data_ptr(), x.data_ptr(), x.nbytes());
    return;
  }
  cpu::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (p >= 1.0) {  // every element dropped
      std::memset(static_cast<void*>(y.data<T>()), 0, y.nbytes());
      return;
    }
    dropout_impl<T>(x.data<T>(), y.data<T>(), x.numel(), p, seed, offset);
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
