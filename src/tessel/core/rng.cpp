// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/rng.h"

#include <cmath>

#include "tessel/core/philox.h"

namespace tessel {

std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  const PhiloxBlock b = philox4x32_10(counter_lo, counter_hi, key);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

namespace {
// 24 random bits -> [0, 1) exactly representable in float.
inline float to_unit(uint32_t x) {
  return float(x >> 8) * (1.0f / 16777216.0f);
}
}  // namespace

float uniform_at(uint64_t seed, uint64_t offset, uint64_t index) {
  return float(philox_stream_bits(seed, offset + index)) * (1.0f / 16777216.0f);
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
