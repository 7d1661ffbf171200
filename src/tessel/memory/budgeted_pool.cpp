// SPDX-License-Identifier: Apache-2.0
#include "tessel/memory/budgeted_pool.h"

#include <cstdlib>

#include "tessel/core/error.h"
#include "tessel/memory/memory_config.h"

namespace tessel::memory {

BudgetedPool::~BudgetedPool() {
  drop_cache();
}

void BudgetedPool::drop_cache() {
  for (auto& [p, n] : cache_) std::free(p);
  cache_.clear();
  cached_bytes_ = 0;
}

void* BudgetedPool::allocate(size_t nbytes) {
  TESSEL_CHECK(fits(nbytes), name_, " tier: a request of ", nbytes, " bytes exceeds its budget (",
               budget_, " bytes budget, ", bytes_in_use(), " in use)");
  for (size_t i = 0; i < cache_.size(); ++i) {
    if (cache_[i].second != nbytes) continue;
    void* p = cache_[i].first;
    cache_[i] = cache_.back();
    cache_.pop_back();
    cached_bytes_ -= nbytes;
    count_alloc(nbytes);
    return p;
  }
  if (bytes_in_use() + cached_bytes_ + nbytes > budget_) drop_cache();
  size_t rounded = (nbytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
  void* p = std::aligned_alloc(kIoAlignment, rounded == 0 ? kIoAlignment : rounded);
  TESSEL_CHECK(p != nullptr, name_, " tier: out of host memory allocating ", nbytes, " bytes (",
               bytes_in_use(), " in use of a ", budget_, " bytes budget)");
  count_alloc(nbytes);
  return p;
}

void BudgetedPool::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  count_free(nbytes);
  cache_.emplace_back(ptr, nbytes);
  cached_bytes_ += nbytes;
}

}  // namespace tessel::memory
