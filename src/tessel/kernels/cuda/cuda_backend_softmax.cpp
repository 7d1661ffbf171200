// SPDX-License-Identifier: Apache-2.0
// CudaBackend's softmax family: softmax, its backward, and the fused softmax cross-entropy
// (ops/softmax.h, ops/cross_entropy.h). The CPU checks cover shapes and dtypes; a target out of
// range is found by the device (its error flag, read after the stream synchronises), and the
// Error then names the first bad target as the CPU's does.
#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/cuda/cuda_adapter.h"
#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/kernels/cuda/ops/cross_entropy.h"
#include "tessel/kernels/cuda/ops/softmax.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels::cuda {

namespace {

// Throws the CPU backend's message for the first target outside [0, vocab) that is not ignored.
void throw_bad_target(std::string_view op, const Tensor& targets, int64_t vocab,
                      int64_t ignore_index) {
  const BadIndex bad = first_bad_index(targets, vocab, &ignore_index);
  TESSEL_FAIL(op, ": target ", bad.value, " at position ", bad.position, " is out of range [0, ",
              vocab, ") for V = ", vocab, " and is not ignore_index ", ignore_index);
}

}  // namespace

void CudaBackend::softmax(const Tensor& x, Tensor& y, bool log) {
  const RowShape r = validate_softmax(*this, x, y);
  check_on_device("softmax", {&x, &y});
  if (x.numel() == 0) return;
  DeviceGuard guard(device_);
  kernels::cuda::softmax(x.dtype(), device_data(x), device_data(y), r.rows, r.cols, log,
                         stream(device_));
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  const RowShape r = validate_softmax_backward(*this, y, dy, dx);
  check_on_device("softmax_backward", {&y, &dy, &dx});
  if (y.numel() == 0) return;
  DeviceGuard guard(device_);
  kernels::cuda::softmax_backward(y.dtype(), device_data(y), device_data(dy), device_data(dx),
                                  r.rows, r.cols, log, stream(device_));
}

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                Tensor& losses, Tensor& lse) {
  const RowShape r = validate_cross_entropy(*this, logits, targets, ignore_index, losses, lse);
  check_on_device("cross_entropy", {&logits, &targets, &losses, &lse});
  if (r.rows == 0) return;
  DeviceGuard guard(device_);
  DeviceFlag error(device_);
  kernels::cuda::cross_entropy(
      logits.dtype(), device_data(logits), targets.dtype(), device_data(targets), ignore_index,
      static_cast<float*>(device_data(losses)), static_cast<float*>(device_data(lse)), r.rows,
      r.cols, error.get(), stream(device_));
  if (error.raised()) throw_bad_target("cross_entropy", targets, r.cols, ignore_index);
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                         const Tensor& lse, const Tensor& dlosses,
                                         int64_t ignore_index, Tensor& dlogits) {
  const RowShape r =
      validate_cross_entropy_backward(*this, logits, targets, lse, dlosses, ignore_index, dlogits);
  check_on_device("cross_entropy_backward", {&logits, &targets, &lse, &dlosses, &dlogits});
  if (r.rows == 0) return;
  DeviceGuard guard(device_);
  DeviceFlag error(device_);
  kernels::cuda::cross_entropy_backward(
      logits.dtype(), device_data(logits), targets.dtype(), device_data(targets),
      static_cast<const float*>(device_data(lse)), static_cast<const float*>(device_data(dlosses)),
      ignore_index, device_data(dlogits), r.rows, r.cols, error.get(), stream(device_));
  if (error.raised()) throw_bad_target("cross_entropy_backward", targets, r.cols, ignore_index);
}

}  // namespace tessel::kernels::cuda
