// SPDX-License-Identifier: Apache-2.0
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) as one
// host/device function, and the dropout stream built on it: element n of the stream named by
// (seed, offset) is word (offset + n) % 4 of block (offset + n) / 4 under key seed, its top 24 bits
// the uniform in [0, 1). core/rng.cpp, the CPU dropout test and the CUDA dropout kernel all use
// these definitions, so a mask is the same bits on every device.
#pragma once

#include <cmath>
#include <cstdint>

#include "tessel/core/host_device.h"

namespace tessel {

struct PhiloxBlock {
  uint32_t w[4];
};

// Four 32-bit words for the 128-bit counter (counter_lo, counter_hi) under a 64-bit key.
TESSEL_HOST_DEVICE PhiloxBlock philox4x32_10(uint64_t counter_lo, uint64_t counter_hi,
                                             uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c0, p1 = uint64_t(kMul1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = uint32_t(p1);
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = uint32_t(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// The 24 bits of stream element `index` (offset already added): uniform = bits * 2^-24.
TESSEL_HOST_DEVICE uint32_t philox_stream_bits(uint64_t seed, uint64_t index) {
  const PhiloxBlock b = philox4x32_10(index / 4, 0, seed);
  return b.w[index % 4] >> 8;
}

// uniform >= p exactly when bits >= ceil(p * 2^24), for p in [0, 1].
inline uint32_t dropout_threshold(double p) {
  return uint32_t(std::ceil(p * 16777216.0));
}

// Whether dropout keeps element i of the draw (seed, offset) at this threshold.
TESSEL_HOST_DEVICE bool dropout_keeps(uint64_t seed, uint64_t offset, uint64_t i,
                                      uint32_t threshold) {
  return philox_stream_bits(seed, offset + i) >= threshold;
}

}  // namespace tessel
