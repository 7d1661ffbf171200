// SPDX-License-Identifier: Apache-2.0
// MemorySource: where a caching allocator gets its segments (cudaMalloc on a GPU, or budgeted host
// memory in tests). Kept apart from the caching bookkeeping so that the bookkeeping runs, and is
// tested, on machines without a GPU.
#pragma once

#include <cstddef>
#include <string>

#include "tessel/tensor/device.h"

namespace tessel {

class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // nbytes of fresh memory, or nullptr when the source has no more (the caching allocator then
  // returns its cached segments and tries once more before it reports out of memory).
  virtual void* acquire(size_t nbytes) = 0;
  virtual void release(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
  // One line for out-of-memory messages: what the source is and what it has left.
  virtual std::string describe() const = 0;
};

// Real host memory (64-byte aligned) up to a byte budget: the caching allocator's tests run over
// it, so that out-of-memory and reuse behave as on a device of that size. Reports Device::cpu().
class BudgetedHostSource final : public MemorySource {
 public:
  explicit BudgetedHostSource(size_t budget_bytes) : budget_(budget_bytes) {}
  ~BudgetedHostSource() override;
  void* acquire(size_t nbytes) override;
  void release(void* ptr, size_t nbytes) override;
  Device device() const override { return Device::cpu(); }
  std::string describe() const override;

  size_t used() const { return used_; }
  int64_t acquires() const { return acquires_; }
  int64_t releases() const { return releases_; }

 private:
  size_t budget_ = 0, used_ = 0;
  int64_t acquires_ = 0, releases_ = 0;
};

}  // namespace tessel
