// SPDX-License-Identifier: Apache-2.0
// Activations are unary kernel ops; their derivatives come from the backend's unary_backward.
// The op name in errors and backward nodes is the kernel's unary op name ("gelu", ...).
#include "tessel/ops/activation.h"

#include "tessel/ops/elementwise.h"

namespace tessel::ops {

using kernels::UnaryOp;

Tensor relu(const Tensor& x) {
  return unary(UnaryOp::Relu, x);
}
Tensor gelu(const Tensor& x) {
  return unary(UnaryOp::Gelu, x);
}
Tensor silu(const Tensor& x) {
  return unary(UnaryOp::Silu, x);
}
Tensor sigmoid(const Tensor& x) {
  return unary(UnaryOp::Sigmoid, x);
}
Tensor tanh(const Tensor& x) {
  return unary(UnaryOp::Tanh, x);
}

}  // namespace tessel::ops
