// SPDX-License-Identifier: Apache-2.0
// BudgetedPool: an Allocator of direct-I/O-aligned host memory that never hands out more than
// its byte budget. It backs the host tier, and the device tier on a machine without an
// accelerator, so the offload policy runs unchanged against a budget it cannot overrun. Freed
// blocks are kept for the next allocation of the same size (chunks all have one size), within
// the budget: a tier's memory is faulted in once, not every time a chunk comes back, and what
// the pool holds, used or cached, never exceeds the budget. Each block is a mapping of its own,
// so a block the pool drops is returned to the machine.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "tessel/tensor/allocator.h"

namespace tessel::memory {

class BudgetedPool final : public Allocator {
 public:
  BudgetedPool(std::string name, size_t budget) : name_(std::move(name)), budget_(budget) {}
  ~BudgetedPool() override;
  BudgetedPool(const BudgetedPool&) = delete;
  BudgetedPool& operator=(const BudgetedPool&) = delete;

  // Throws an Error naming the pool, its budget, the bytes in use and the request when the
  // request does not fit.
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  Device device() const override { return Device::cpu(); }

  bool fits(size_t nbytes) const { return bytes_in_use() + nbytes <= budget_; }
  size_t budget() const { return budget_; }
  size_t available() const { return budget_ - bytes_in_use(); }
  // Bytes in use plus freed blocks kept for reuse: what the pool takes from the machine.
  size_t bytes_held() const { return bytes_in_use() + cached_bytes_; }
  const std::string& name() const { return name_; }
  // Frees the blocks kept for reuse (to the machine, not only to the pool).
  void trim() { drop_cache(); }
  // Takes over block `ptr` of `nbytes`, which `from` has just been handed back (deallocate) and
  // keeps for reuse, as if this pool had allocated it: how a chunk changes tiers without a copy
  // when both pools hand out the same memory (the device tier of a CPU-only machine is host
  // memory). Throws an Error when the block does not fit this budget or `from` does not keep it.
  void* adopt(BudgetedPool& from, void* ptr, size_t nbytes);

 private:
  void drop_cache();

  std::string name_;
  size_t budget_;
  std::vector<std::pair<void*, size_t>> cache_;  // freed blocks and their sizes
  size_t cached_bytes_ = 0;
};

}  // namespace tessel::memory
