// SPDX-License-Identifier: Apache-2.0
#include "tessel/memory/budgeted_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tessel/core/error.h"
#include "tessel/memory/memory_config.h"

namespace tessel::memory {

BudgetedPool::~BudgetedPool() {
  drop_cache();
}

namespace {

size_t mapped_size(size_t nbytes) {
  const size_t rounded = (nbytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
  return rounded == 0 ? kIoAlignment : rounded;
}

}  // namespace

void BudgetedPool::drop_cache() {
  for (auto& [p, n] : cache_) ::munmap(p, mapped_size(n));
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
  // A mapping of its own (page-aligned, as direct I/O wants): dropped, it leaves the process at
  // once, where the host heap would keep it (tensor/allocator.cpp keeps freed memory below 1 GiB).
  void* p = ::mmap(nullptr, mapped_size(nbytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TESSEL_CHECK(p != MAP_FAILED, name_, " tier: out of host memory mapping ", nbytes, " bytes (",
               bytes_in_use(), " in use of a ", budget_, " bytes budget): ", std::strerror(errno));
  count_alloc(nbytes);
  return p;
}

void* BudgetedPool::adopt(BudgetedPool& from, void* ptr, size_t nbytes) {
  TESSEL_CHECK(fits(nbytes), name_, " tier: taking over a block of ", nbytes,
               " bytes exceeds its budget (", budget_, " bytes budget, ", bytes_in_use(),
               " in use)");
  auto it = std::find(from.cache_.begin(), from.cache_.end(), std::pair{ptr, nbytes});
  TESSEL_CHECK(it != from.cache_.end(), name_, " tier: the ", from.name_,
               " tier does not keep the block of ", nbytes, " bytes being taken over");
  from.cache_.erase(it);
  from.cached_bytes_ -= nbytes;
  // What this pool holds, used or cached, stays within its budget: a block it keeps for reuse
  // goes to `from` in exchange (which has just given one up), so both keep their memory resident
  // and a chunk moving back and forth never faults fresh pages in.
  if (bytes_in_use() + cached_bytes_ + nbytes > budget_) {
    auto same = std::find_if(cache_.begin(), cache_.end(),
                             [nbytes](const auto& block) { return block.second == nbytes; });
    if (same != cache_.end() && from.bytes_held() + nbytes <= from.budget_) {
      from.cache_.push_back(*same);
      from.cached_bytes_ += nbytes;
      cache_.erase(same);
      cached_bytes_ -= nbytes;
    }
    if (bytes_in_use() + cached_bytes_ + nbytes > budget_) drop_cache();
  }
  count_alloc(nbytes);
  return ptr;
}

void BudgetedPool::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  count_free(nbytes);
  cache_.emplace_back(ptr, nbytes);
  cached_bytes_ += nbytes;
}

}  // namespace tessel::memory
