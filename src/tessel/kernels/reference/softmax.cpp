// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::softmax(const Tensor& x, Tensor& y, bool log) {
  TESSEL_FAIL("reference softmax: not implemented yet");
}

void ReferenceBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  TESSEL_FAIL("reference softmax_backward: not implemented yet");
}

}  // namespace tessel::kernels
