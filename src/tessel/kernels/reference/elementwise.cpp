// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::unary(UnaryOp op, const Tensor& x, Tensor& y, double alpha) {
  TESSEL_FAIL("reference unary: not implemented yet");
}

void ReferenceBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                      double alpha) {
  TESSEL_FAIL("reference unary_backward: not implemented yet");
}

void ReferenceBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  TESSEL_FAIL("reference binary: not implemented yet");
}

}  // namespace tessel::kernels
