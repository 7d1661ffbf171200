// SPDX-License-Identifier: Apache-2.0
// CudaBackend's reductions: reduce (ops/reduce.h) and square_sums, whose f64 sums are summed on
// the device into scratch from the caching allocator and copied to the caller's host span.
#include <vector>

#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/cuda/cuda_adapter.h"
#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/kernels/cuda/ops/reduce.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels::cuda {

void CudaBackend::reduce(ReduceOp op, const Tensor& x, std::span<const int> dims, Tensor& out) {
  const std::vector<int> norm = validate_reduce(*this, op, x, dims, out);
  check_on_device("reduce", {&x, &out});
  if (out.numel() == 0) return;
  DeviceGuard guard(device_);
  kernels::cuda::reduce(op, x.dtype(), device_data(x), x.shape().dims(), norm, device_data(out),
                        stream(device_));
}

void CudaBackend::square_sums(std::span<const Tensor> xs, std::span<double> out) {
  // validate_square_sums wants host tensors; the same checks for tensors on this device.
  TESSEL_CHECK(xs.size() == out.size(), "square_sum: ", xs.size(), " tensors but ", out.size(),
               " outputs");
  std::vector<SquareSumInput> inputs;
  inputs.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string what = "tensor " + std::to_string(i);
    check_supported(*this, Op::SquareSum, xs[i], what.c_str());
    check_on_device("square_sum", {&xs[i]});
    inputs.push_back(
        {xs[i].numel() > 0 ? device_data(xs[i]) : nullptr, xs[i].dtype(), xs[i].numel()});
  }
  if (xs.empty()) return;
  DeviceGuard guard(device_);
  Tensor sums = empty({int64_t(xs.size())}, DType::F64, Device::cuda(device_));
  Tensor workspace = device_workspace(device_, square_sums_workspace_bytes(inputs));
  kernels::cuda::square_sums(inputs, static_cast<double*>(device_data(sums)),
                             device_data(workspace), stream(device_));
  const Tensor host = to_device(sums, Device::cpu());
  const double* s = host.data<double>();
  for (size_t i = 0; i < out.size(); ++i) out[i] = s[i];
}

}  // namespace tessel::kernels::cuda
