// SPDX-License-Identifier: Apache-2.0
// The meta device's count: the bytes meta tensors would occupy, counted as their storages are
// made and destroyed (they own no memory). The planner reads its peak over a shape-only step as
// the step's activation and temporary memory, which the host allocator would count for the same
// step (plan/memory_model.h): PyTorch's meta device has no such count; here it is what makes a
// memory prediction exact instead of a per-op estimate.
#pragma once

#include "tessel/tensor/allocator.h"

namespace tessel {

class MetaAllocator final : public Allocator {
 public:
  // Counts; returns a placeholder address (a meta storage has no data, but knows it holds its
  // bytes: Storage::release and materialize count them out and in again).
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;  // null: nothing held, nothing counted
  Device device() const override { return Device::meta(); }
};

MetaAllocator& meta_allocator();

}  // namespace tessel
