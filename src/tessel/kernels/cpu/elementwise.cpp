// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels {

void CpuBackend::unary(UnaryOp op, const Tensor& x, Tensor& y, double alpha) {
  TESSEL_FAIL("cpu unary: not implemented yet");
}

void CpuBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                      double alpha) {
  TESSEL_FAIL("cpu unary_backward: not implemented yet");
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  TESSEL_FAIL("cpu binary: not implemented yet");
}

}  // namespace tessel::kernels
