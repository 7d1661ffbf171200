// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/rng.h"

#include <cmath>

namespace tessel {

std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kMul0) * c0, p1 = uint64_t(kMul1) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = uint32_t(p1);
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = uint32_t(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

namespace {
// 24 random bits -> [0, 1) exactly representable in float.
inline float to_unit(uint32_t x) {
  return float(x >> 8) * (1.0f / 16777216.0f);
}
}  // namespace

float uniform_at(uint64_t seed, uint64_t offset, uint64_t index) {
  uint64_t n = offset + index;
  auto r = philox4x32(n / 4, 0, seed);
  return to_unit(r[n % 4]);
}

float normal_at(uint64_t seed, uint64_t offset, uint64_t index) {
  // One Philox block yields two Box-Muller pairs: elements 2j and 2j+1 share a pair. The block
  // depends only on the element's position, so any partition over threads gives the same value.
  uint64_t n = offset + index;
  auto r = philox4x32(n / 4, 1, seed);
  int pair = int(n % 4) / 2;
  float u1 = 1.0f - to_unit(r[2 * pair]);  // in (0, 1]: log stays finite
  float u2 = to_unit(r[2 * pair + 1]);
  float radius = std::sqrt(-2.0f * std::log(u1));
  float angle = 6.2831853071795864769f * u2;
  return (n % 2 == 0) ? radius * std::cos(angle) : radius * std::sin(angle);
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) {
  default_generator().set_state(seed, 0);
}

}  // namespace tessel
