// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/allocator.h"

#include <malloc.h>

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
  // glibc serves blocks above 32 MiB with a fresh mmap and unmaps them on free, so a training
  // step's big temporaries (the [B*T, vocab] logits and their gradient, the tied embedding's
  // [vocab, C] weight gradient) page-fault in fresh zeroed memory every step: ~70k faults per
  // GPT-2 124M step at B=4, T=64. Served from the heap and not trimmed back, they are reused.
  CpuAllocator() {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
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
