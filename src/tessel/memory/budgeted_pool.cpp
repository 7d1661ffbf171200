// SPDX-License-Identifier: Apache-2.0
#include "tessel/memory/budgeted_pool.h"

#include <cstdlib>

#include "tessel/core/error.h"
#include "tessel/memory/memory_config.h"

namespace tessel::memory {

void* BudgetedPool::allocate(size_t nbytes) {
  TESSEL_CHECK(fits(nbytes), name_, " tier: a request of ", nbytes, " bytes exceeds its budget (",
               budget_, " bytes budget, ", bytes_in_use(), " in use)");
  size_t rounded = (nbytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
  void* p = std::aligned_alloc(kIoAlignment, rounded == 0 ? kIoAlignment : rounded);
  TESSEL_CHECK(p != nullptr, name_, " tier: out of host memory allocating ", nbytes, " bytes (",
               bytes_in_use(), " in use of a ", budget_, " bytes budget)");
  count_alloc(nbytes);
  return p;
}

void BudgetedPool::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  count_free(nbytes);
}

}  // namespace tessel::memory
