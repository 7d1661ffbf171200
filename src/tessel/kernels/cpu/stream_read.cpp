// SPDX-License-Identifier: Apache-2.0
// The memory read-bandwidth probe, compiled per kernel set like the kernels: a baseline (SSE)
// build of it reads about a third slower than the memory system allows on an AVX-512 machine.
#include "tessel/kernels/cpu/isa_region.h"
TESSEL_ISA_BEGIN

namespace tessel::kernels::TESSEL_KERNEL_ISA {

float stream_read_sum(const float* p, int64_t n) {
  // 32 independent partial sums per thread: one running sum would be bound by the add latency
  // (about 4 bytes per cycle), far below the memory system.
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

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
