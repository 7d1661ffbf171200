// SPDX-License-Identifier: Apache-2.0
// CudaBackend::convert: dtype casts on the device (elementwise.cu), as Backend::convert on the
// host.
#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/kernels/cuda/elementwise_launch.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels::cuda {

void CudaBackend::convert(const Tensor& src, Tensor& dst) {
  TESSEL_CHECK(src.defined() && dst.defined() && src.numel() == dst.numel(),
               "convert: source and destination must be defined and equally sized, got ",
               src.defined() ? src.numel() : -1, " and ", dst.defined() ? dst.numel() : -1,
               " elements");
  check_on_device("convert", {&src, &dst});
  if (src.numel() == 0) return;
  DeviceGuard guard(device_);
  TESSEL_CUDA_CHECK(launch_convert(device_data(src), src.dtype(), device_data(dst), dst.dtype(),
                                   src.numel(), stream(device_)));
}

}  // namespace tessel::kernels::cuda
