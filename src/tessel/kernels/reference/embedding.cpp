// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  TESSEL_FAIL("reference embedding: not implemented yet");
}

void ReferenceBackend::embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) {
  TESSEL_FAIL("reference embedding_backward: not implemented yet");
}

}  // namespace tessel::kernels
