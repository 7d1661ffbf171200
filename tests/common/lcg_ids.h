// SPDX-License-Identifier: Apache-2.0
// Token ids [b, t] (i64) below `vocab` from a 64-bit linear congruential generator (Knuth's MMIX
// constants, the high bits taken): the same ids on every machine and compiler, for model tests
// that compare two runs of one batch.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::test {

inline Tensor lcg_ids(int64_t b, int64_t t, uint64_t seed, int64_t vocab) {
  std::vector<int64_t> v(size_t(b * t));
  for (auto& x : v) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x = int64_t((seed >> 33) % uint64_t(vocab));
  }
  return from_data(v, Shape{b, t});
}

}  // namespace tessel::test
