// SPDX-License-Identifier: Apache-2.0
#include "tessel/nn/device_move.h"

#include <map>

#include "tessel/core/error.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::nn {

namespace {

// The whole of `storage` as a flat byte tensor (I8), for copies between devices.
Tensor bytes_of(const std::shared_ptr<Storage>& storage) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->shape = Shape{int64_t(storage->nbytes())};
  impl->dtype = DType::I8;
  return Tensor(std::move(impl));
}

Allocator& allocator_of(Device device) {
  return device.is_cpu() ? cpu_allocator() : device_allocator(device);
}

// Moves the storages under `impls` (see move_to_device).
int64_t move_impls(const std::vector<std::shared_ptr<TensorImpl>>& impls, Device device) {
  TESSEL_CHECK(device.is_cpu() || device.type == DeviceType::CUDA, "move_to_device: to ",
               device.str(), " (only the host and CUDA devices hold module state)");
  if (!device.is_cpu()) require_cuda_device(device);

  // Old storage -> the storage that holds its bytes on `device` (itself when rebound).
  std::map<Storage*, std::shared_ptr<Storage>> moved;
  int64_t bytes = 0;
  Allocator& allocator = allocator_of(device);
  for (const auto& impl : impls) {
    const std::shared_ptr<Storage>& old = impl->storage;
    if (old->device() == device && !moved.count(old.get())) continue;
    auto it = moved.find(old.get());
    if (it == moved.end()) {
      TESSEL_CHECK(old->is_materialized(),
                   "move_to_device: ", impl->name.empty() ? "a tensor" : impl->name,
                   " has released storage (", old->nbytes(), " bytes): materialise it first");
      const size_t n = old->nbytes();
      bytes += int64_t(n);
      if (old->owns_memory()) {
        void* data = n > 0 ? allocator.allocate(n) : nullptr;
        Tensor dst = bytes_of(std::make_shared<Storage>(data, n, device, nullptr));
        copy_across_devices(bytes_of(old), dst);
        old->rebind(data, allocator);  // every view of `old` now reads the copy
        it = moved.emplace(old.get(), old).first;
      } else {
        // External memory cannot be rebound: a new storage takes the copy.
        auto owning = std::make_shared<Storage>(n, allocator);
        Tensor dst = bytes_of(owning);
        copy_across_devices(bytes_of(old), dst);
        it = moved.emplace(old.get(), owning).first;
      }
    }
    impl->storage = it->second;
  }
  return bytes;
}

}  // namespace

int64_t move_to_device(Module& module, Device device) {
  std::vector<std::shared_ptr<TensorImpl>> impls;
  for (const auto& [name, t] : module.named_parameters()) {
    impls.push_back(t.impl_ptr());
    if (t.impl_ptr()->grad) impls.push_back(t.impl_ptr()->grad);
  }
  for (const auto& [name, t] : module.named_buffers()) impls.push_back(t.impl_ptr());
  return move_impls(impls, device);
}

int64_t move_to_device(const NamedTensors& tensors, Device device) {
  std::vector<std::shared_ptr<TensorImpl>> impls;
  for (const auto& [name, t] : tensors)
    if (t.defined()) impls.push_back(t.impl_ptr());
  return move_impls(impls, device);
}

}  // namespace tessel::nn
