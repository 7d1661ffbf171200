// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels {

void CpuBackend::softmax(const Tensor& x, Tensor& y, bool log) {
  TESSEL_FAIL("cpu softmax: not implemented yet");
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  TESSEL_FAIL("cpu softmax_backward: not implemented yet");
}

}  // namespace tessel::kernels
