// SPDX-License-Identifier: Apache-2.0
// Shape-only host tensors (unallocated.h).
#include "tessel/tensor/unallocated.h"

#include "tessel/tensor/default_device.h"

namespace tessel {

namespace {

// Hands out nothing: a Storage made from it starts released, then is bound to the host allocator
// (Storage::rebind with no data), which materialize() draws from.
class NoBytesAllocator final : public Allocator {
 public:
  void* allocate(size_t) override { return nullptr; }
  void deallocate(void*, size_t) override {}
  Device device() const override { return Device::cpu(); }
};

}  // namespace

Tensor unallocated(const Shape& shape, DType dtype) {
  if (default_device().is_meta()) return empty(shape, dtype);
  static NoBytesAllocator no_bytes;
  auto storage = std::make_shared<Storage>(size_t(shape.numel()) * dtype_size(dtype), no_bytes);
  storage->rebind(nullptr, cpu_allocator());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace tessel
