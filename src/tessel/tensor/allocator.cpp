// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <new>

#include "tessel/core/error.h"
#include "tessel/core/process_memory.h"
#include "tessel/tensor/host_memory.h"
#include "tessel/tensor/mapped_block_cache.h"

namespace tessel {

void Allocator::count_alloc(size_t nbytes) {
  size_t now = in_use_.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

namespace {

// AddressSanitizer only sees overruns of blocks malloc hands out: under it every block comes from
// the heap.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMapLargeBlocks = false;
#else
constexpr bool kMapLargeBlocks = true;
#endif
// Blocks of this size and more are mappings of their own; the rest come from the heap.
constexpr size_t kMappedBlockBytes = size_t(1) << 20;

class CpuAllocator final : public Allocator {
 public:
  // Blocks of kMappedBlockBytes and more are mappings of their own, cached for reuse
  // (tensor/mapped_block_cache.h: why not the heap, and the bound on what the cache holds). The
  // rest come from glibc's heap, which is told not to return memory on free: without that, each
  // step's many small temporaries would page-fault in again.
  CpuAllocator() {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  void* allocate(size_t nbytes) override {
    void* p = nullptr;
    if (kMapLargeBlocks && nbytes >= kMappedBlockBytes) {
      p = blocks_.take(nbytes);
    } else {
      size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
      p = std::aligned_alloc(kCpuAlignment, rounded == 0 ? kCpuAlignment : rounded);
    }
    TESSEL_CHECK(p != nullptr, "out of host memory allocating ", nbytes, " bytes (", bytes_in_use(),
                 " bytes in use)");
    count_alloc(nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    if (kMapLargeBlocks && nbytes >= kMappedBlockBytes) {
      blocks_.give(ptr);
    } else {
      std::free(ptr);
    }
    count_free(nbytes);
  }
  Device device() const override { return Device::cpu(); }

  MappedBlockCache blocks_;
};

CpuAllocator& host() {
  // Never destroyed: tensors held by other statics may be freed after this one would be.
  static CpuAllocator* allocator = new CpuAllocator();
  return *allocator;
}
}  // namespace

Allocator& cpu_allocator() {
  return host();
}

size_t host_cached_bytes() {
  return host().blocks_.cached_bytes();
}

int64_t host_block_maps() {
  return host().blocks_.maps();
}

size_t host_spare_bytes() {
  return host().blocks_.spare_bytes();
}

HostCycleFollowing::HostCycleFollowing() {
  host().blocks_.follow_cycles(true);
}

HostCycleFollowing::~HostCycleFollowing() {
  try {
    host().blocks_.follow_cycles(false);
  } catch (...) {  // a destructor must not throw; only an unmatched off throws
  }
}

void release_free_host_memory() {
  host().blocks_.release_cached();
  release_free_heap();
}

}  // namespace tessel
