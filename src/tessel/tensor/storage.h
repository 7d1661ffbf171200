// SPDX-License-Identifier: Apache-2.0
// Storage: a block of bytes on one device, shared by every tensor that views it. Its memory can be
// released and re-materialised while tensors keep pointing at the Storage object, which is what
// ZeRO-3 parameter partitioning, chunked memory and offload need: the handle stays valid, only the
// bytes come and go. Storage may also wrap external memory (an mmap'd file) it does not own.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "tessel/tensor/allocator.h"

namespace tessel {

class Storage {
 public:
  // Allocates nbytes from the allocator (contents uninitialised).
  Storage(size_t nbytes, Allocator& allocator);
  // Wraps external memory; `deleter` (may be empty) runs when the Storage is destroyed.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data();  // throws Error while released
  const void* data() const;
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool is_materialized() const { return data_ != nullptr || nbytes_ == 0; }
  // Whether the bytes come from an allocator (and so can be rebound), not external memory.
  bool owns_memory() const { return allocator_ != nullptr; }

  // Frees the bytes but keeps the size; data() throws until materialize().
  void release();
  // Allocates the bytes again (contents undefined); no-op when already materialised.
  void materialize();
  // Takes over `data` (nbytes() bytes that `allocator` handed out) as this storage's memory and
  // frees the bytes it held: how memory/ moves a chunk between tiers, each tier its own
  // allocator, while every tensor viewing the storage keeps its handle. A null `data` leaves the
  // storage released, to be materialised from `allocator`.
  void rebind(void* data, Allocator& allocator);

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null for external memory
  std::function<void(void*)> deleter_;
};

}  // namespace tessel
