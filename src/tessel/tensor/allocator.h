// SPDX-License-Identifier: Apache-2.0
// Allocator interface and the host allocator. Every allocator counts bytes in use and the peak,
// which is how activation memory and ZeRO savings are measured rather than estimated.
#pragma once

#include <atomic>
#include <cstddef>

#include "tessel/tensor/device.h"

namespace tessel {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;

  size_t bytes_in_use() const { return in_use_.load(std::memory_order_relaxed); }
  size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  void reset_peak() { peak_.store(bytes_in_use(), std::memory_order_relaxed); }

 protected:
  void count_alloc(size_t nbytes);
  void count_free(size_t nbytes) { in_use_.fetch_sub(nbytes, std::memory_order_relaxed); }

 private:
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

// 64-byte aligned host memory (a cache line; also what AVX-512 loads want).
Allocator& cpu_allocator();

inline constexpr size_t kCpuAlignment = 64;

}  // namespace tessel
