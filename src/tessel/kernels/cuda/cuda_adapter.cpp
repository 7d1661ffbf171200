// SPDX-License-Identifier: Apache-2.0
// CudaBackend's shared adapter helpers (cuda_adapter.h).
#include "tessel/kernels/cuda/cuda_adapter.h"

#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels::cuda {

Tensor device_workspace(int device, size_t bytes) {
  return empty({int64_t(bytes)}, DType::I8, Device::cuda(device));
}

DeviceFlag::DeviceFlag(int device) : flag_(empty({1}, DType::I32, Device::cuda(device))) {
  DeviceGuard guard(device);
  TESSEL_CUDA_CHECK(cudaMemsetAsync(device_data(flag_), 0, sizeof(int), stream(device)));
}

int* DeviceFlag::get() const {
  return static_cast<int*>(device_data(flag_));
}

bool DeviceFlag::raised() const {
  return to_device(flag_, Device::cpu()).data<int32_t>()[0] != 0;
}

BadIndex first_bad_index(const Tensor& ids, int64_t limit, const int64_t* ignore) {
  const Tensor host = to_device(ids, Device::cpu());
  IndexView view(host);
  for (int64_t i = 0; i < host.numel(); ++i) {
    const int64_t id = view[i];
    if ((id >= 0 && id < limit) || (ignore != nullptr && id == *ignore)) continue;
    return {i, id};
  }
  return {};
}

}  // namespace tessel::kernels::cuda
