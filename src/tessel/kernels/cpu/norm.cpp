// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels {

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                  Tensor& mean, Tensor& rstd) {
  TESSEL_FAIL("cpu layer_norm: not implemented yet");
}

void CpuBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight,
                           Tensor& dbias) {
  TESSEL_FAIL("cpu layer_norm_backward: not implemented yet");
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) {
  TESSEL_FAIL("cpu rms_norm: not implemented yet");
}

void CpuBackend::rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                         Tensor& dx, Tensor& dweight) {
  TESSEL_FAIL("cpu rms_norm_backward: not implemented yet");
}

}  // namespace tessel::kernels
