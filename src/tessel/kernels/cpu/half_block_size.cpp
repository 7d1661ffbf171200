// SPDX-License-Identifier: Apache-2.0
#include "tessel/kernels/cpu/half_block_size.h"

#include <atomic>

#include "tessel/core/error.h"

namespace tessel::kernels::cpu {

namespace {
std::atomic<int64_t> g_block_bytes{int64_t(32) << 20};
}

int64_t half_block_bytes() {
  return g_block_bytes.load(std::memory_order_relaxed);
}

int64_t set_half_block_bytes(int64_t bytes) {
  TESSEL_CHECK(bytes > 0, "set_half_block_bytes: ", bytes, " must be > 0");
  return g_block_bytes.exchange(bytes, std::memory_order_relaxed);
}

}  // namespace tessel::kernels::cpu
