// SPDX-License-Identifier: Apache-2.0
// Thread count control. tessel's kernels and the GEMM library share one OpenMP pool, so there is
// one knob: TESSEL_NUM_THREADS (default: all cores), or set_num_threads().
#pragma once

#include <cstdint>
#include <functional>

namespace tessel {

int num_threads();
void set_num_threads(int n);  // n >= 1; throws Error otherwise

// Runs fn(lo, hi) over [begin, end) split into contiguous chunks across the pool. Ranges smaller
// than `grain` elements run on the calling thread (a parallel region costs microseconds).
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tessel
