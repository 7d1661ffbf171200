// SPDX-License-Identifier: Apache-2.0
// CudaBackend's LayerNorm and RMSNorm, forward and backward (ops/norm.h): the CPU checks, then
// the launchers; the backward's weight / bias gradient chunks go to scratch from the caching
// allocator on the device's stream.
#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/cuda/cuda_adapter.h"
#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/kernels/cuda/ops/norm.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels::cuda {

namespace {

// The device address of an optional tensor (null when undefined: "no affine", "not saved").
void* maybe(const Tensor& t) {
  return t.defined() ? device_data(t) : nullptr;
}
float* maybe_f32(const Tensor& t) {
  return static_cast<float*>(maybe(t));
}

}  // namespace

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                             Tensor& y, Tensor& mean, Tensor& rstd) {
  const RowShape r = validate_layer_norm(*this, x, weight, bias, eps, y, mean, rstd);
  check_on_device("layer_norm", {&x, &weight, &bias, &y, &mean, &rstd});
  if (r.rows == 0 || r.cols == 0) return;
  DeviceGuard guard(device_);
  kernels::cuda::layer_norm(x.dtype(), device_data(x), maybe(weight), maybe(bias), eps,
                            device_data(y), maybe_f32(mean), maybe_f32(rstd), r.rows, r.cols,
                            stream(device_));
}

void CudaBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                      Tensor& dweight, Tensor& dbias) {
  const RowShape r =
      validate_layer_norm_backward(*this, dy, x, weight, mean, rstd, dx, dweight, dbias);
  check_on_device("layer_norm_backward", {&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias});
  if (r.cols == 0) return;  // every output is empty; with rows 0 the launcher zeroes dweight, dbias
  DeviceGuard guard(device_);
  Tensor workspace = device_workspace(device_, norm_backward_workspace_bytes(r.rows, r.cols));
  kernels::cuda::layer_norm_backward(x.dtype(), device_data(dy), device_data(x), maybe(weight),
                                     static_cast<const float*>(device_data(mean)),
                                     static_cast<const float*>(device_data(rstd)), device_data(dx),
                                     maybe(dweight), maybe(dbias), r.rows, r.cols,
                                     device_data(workspace), stream(device_));
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y,
                           Tensor& rstd) {
  const RowShape r = validate_rms_norm(*this, x, weight, eps, y, rstd);
  check_on_device("rms_norm", {&x, &weight, &y, &rstd});
  if (r.rows == 0 || r.cols == 0) return;
  DeviceGuard guard(device_);
  kernels::cuda::rms_norm(x.dtype(), device_data(x), maybe(weight), eps, device_data(y),
                          maybe_f32(rstd), r.rows, r.cols, stream(device_));
}

void CudaBackend::rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                    const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  const RowShape r = validate_rms_norm_backward(*this, dy, x, weight, rstd, dx, dweight);
  check_on_device("rms_norm_backward", {&dy, &x, &weight, &rstd, &dx, &dweight});
  if (r.cols == 0) return;  // every output is empty; with rows 0 the launcher zeroes dweight
  DeviceGuard guard(device_);
  Tensor workspace = device_workspace(device_, norm_backward_workspace_bytes(r.rows, r.cols));
  kernels::cuda::rms_norm_backward(x.dtype(), device_data(dy), device_data(x), maybe(weight),
                                   static_cast<const float*>(device_data(rstd)), device_data(dx),
                                   maybe(dweight), r.rows, r.cols, device_data(workspace),
                                   stream(device_));
}

}  // namespace tessel::kernels::cuda
