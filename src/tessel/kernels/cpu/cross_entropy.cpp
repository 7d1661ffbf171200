// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels {

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     Tensor& losses, Tensor& lse) {
  TESSEL_FAIL("cpu cross_entropy: not implemented yet");
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& dlosses, int64_t ignore_index, Tensor& dlogits) {
  TESSEL_FAIL("cpu cross_entropy_backward: not implemented yet");
}

}  // namespace tessel::kernels
