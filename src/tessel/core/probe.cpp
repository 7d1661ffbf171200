// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/probe.h"

namespace tessel {

float stream_read_sum(const float* p, int64_t n) {
  constexpr int64_t kLanes = 32;
  const int64_t blocks = n / kLanes;
  float total = 0;
#pragma omp parallel reduction(+ : total)
  {
    float acc[kLanes] = {};
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t l = 0; l < kLanes; ++l) acc[l] += p[b * kLanes + l];
    }
    for (float a : acc) total += a;
  }
  for (int64_t i = blocks * kLanes; i < n; ++i) total += p[i];
  return total;
}

}  // namespace tessel
