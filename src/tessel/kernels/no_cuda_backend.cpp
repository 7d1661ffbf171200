// SPDX-License-Identifier: Apache-2.0
// backend_for(Device::cuda(i)) in a build without CUDA: the Error that says so.
#include "tessel/kernels/cuda/cuda_backend_instance.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels {

Backend& cuda_backend(int device) {
  require_cuda_device(Device::cuda(device));  // throws: built without CUDA
  TESSEL_FAIL("no CUDA backend in this build");
}

}  // namespace tessel::kernels
