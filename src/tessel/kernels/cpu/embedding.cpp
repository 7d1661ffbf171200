// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels {

void CpuBackend::embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  TESSEL_FAIL("cpu embedding: not implemented yet");
}

void CpuBackend::embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) {
  TESSEL_FAIL("cpu embedding_backward: not implemented yet");
}

}  // namespace tessel::kernels
