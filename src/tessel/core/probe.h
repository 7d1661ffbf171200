// SPDX-License-Identifier: Apache-2.0
// Machine probes. stream_read_sum() reads a buffer once, as fast as the memory system allows: the
// kernel behind the "read bandwidth" limit that memory-bound kernels and decoding are quoted
// against.
#pragma once

#include <cstdint>

namespace tessel {

// Sum of p[0, n) over the thread pool. Keeps 32 independent partial sums per thread: one running
// sum would be bound by the add latency (about 4 bytes per cycle), far below the memory system.
float stream_read_sum(const float* p, int64_t n);

}  // namespace tessel
