// SPDX-License-Identifier: Apache-2.0
// CudaBackend::adamw: the CPU checks, then one tensor of ops/adamw.h's multi-tensor launcher.
// Backend::adamw applies params.weight_decay as given (the caller decides which tensors decay).
#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/kernels/cuda/ops/adamw.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels::cuda {

void CudaBackend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                        const AdamWParams& params) {
  validate_adamw(*this, param, grad, m, v, params);
  check_on_device("adamw", {&param, &grad, &m, &v});
  if (param.numel() == 0) return;
  DeviceGuard guard(device_);
  const AdamWTensor t{static_cast<float*>(device_data(param)),
                      static_cast<const float*>(device_data(grad)),
                      static_cast<float*>(device_data(m)),
                      static_cast<float*>(device_data(v)),
                      param.numel(),
                      /*decay=*/true};
  kernels::cuda::adamw(std::span<const AdamWTensor>(&t, 1), params, stream(device_));
}

}  // namespace tessel::kernels::cuda
