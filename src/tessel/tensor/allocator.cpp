// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/allocator.h"

#include <cstdlib>
#include <new>

#include "tessel/core/error.h"

namespace tessel {

void Allocator::count_alloc(size_t nbytes) {
  size_t now = in_use_.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

namespace {
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded == 0 ? kCpuAlignment : rounded);
    TESSEL_CHECK(p != nullptr, "out of host memory allocating ", nbytes, " bytes (", bytes_in_use(),
                 " bytes in use)");
    count_alloc(nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    std::free(ptr);
    count_free(nbytes);
  }
  Device device() const override { return Device::cpu(); }
};
}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

}  // namespace tessel
