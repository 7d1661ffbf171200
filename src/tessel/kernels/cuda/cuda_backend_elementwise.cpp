// SPDX-License-Identifier: Apache-2.0
// CudaBackend's elementwise ops (unary, unary_backward, binary, dropout): the CPU backend's checks,
// then the launchers of ops/elementwise.h and ops/dropout.h on the device's stream.
#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/kernels/cuda/ops/dropout.h"
#include "tessel/kernels/cuda/ops/elementwise.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels::cuda {

void CudaBackend::unary(UnaryOp op, const Tensor& x, Tensor& y, double alpha) {
  validate_unary(*this, x, y);
  check_on_device("unary", {&x, &y});
  if (x.numel() == 0) return;
  DeviceGuard guard(device_);
  kernels::cuda::unary(op, x.dtype(), device_data(x), device_data(y), x.numel(), alpha,
                       stream(device_));
}

void CudaBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                                 Tensor& dx, double alpha) {
  validate_unary_backward(*this, x, y, dy, dx);
  check_on_device("unary_backward", {&x, &y, &dy, &dx});
  if (x.numel() == 0) return;
  // The launcher reads y exactly for the ops whose derivative comes from it; a caller may leave
  // y undefined, so it is computed first (stream order puts it before the backward).
  Tensor fx = y;
  if (unary_derivative_reads_y(op) && !fx.defined()) {
    fx = empty_like(x);
    unary(op, x, fx, alpha);
  }
  DeviceGuard guard(device_);
  kernels::cuda::unary_backward(
      op, x.dtype(), device_data(x), unary_derivative_reads_y(op) ? device_data(fx) : nullptr,
      device_data(dy), device_data(dx), x.numel(), alpha, stream(device_));
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  validate_binary(*this, op, a, b, out);
  check_on_device("binary", {&a, &b, &out});
  if (out.numel() == 0) return;
  DeviceGuard guard(device_);
  kernels::cuda::binary(op, a.dtype(), device_data(a), a.shape().dims(), device_data(b),
                        b.shape().dims(), device_data(out), out.shape().dims(), stream(device_));
}

void CudaBackend::dropout(const Tensor& x, Tensor& y, double p, uint64_t seed, uint64_t offset) {
  validate_dropout(*this, x, y, p);
  check_on_device("dropout", {&x, &y});
  if (x.numel() == 0) return;
  DeviceGuard guard(device_);
  kernels::cuda::dropout(x.dtype(), device_data(x), device_data(y), x.numel(), p, seed, offset,
                         stream(device_));
}

}  // namespace tessel::kernels::cuda
