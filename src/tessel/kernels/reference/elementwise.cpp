// SPDX-License-Identifier: Apache-2.0
// Reference unary, unary-backward and broadcasting binary kernels: the textbook formulas in
// double, one element at a time, rearranged by exact identities where the literal form would
// cancel (GELU's 1 + tanh u for x << 0). Derivatives are written from x alone, so they also
// check the CPU backend's cheaper forms that reuse y.
#include <cmath>
#include <numbers>
#include <vector>

#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

namespace {

constexpr double kGeluC = 0.044715;
const double kGeluK = std::sqrt(2.0 / std::numbers::pi);

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

double unary_value(UnaryOp op, double x, double alpha) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Exp:
      return std::exp(x);
    case UnaryOp::Log:
      return std::log(x);
    case UnaryOp::Sqrt:
      return std::sqrt(x);
    case UnaryOp::Rsqrt:
      return 1.0 / std::sqrt(x);
    case UnaryOp::Abs:
      return std::fabs(x);
    case UnaryOp::Square:
      return x * x;
    case UnaryOp::Tanh:
      return std::tanh(x);
    case UnaryOp::Sigmoid:
      return sigmoid(x);
    case UnaryOp::Relu:
      return x > 0 ? x : 0.0;
    case UnaryOp::Gelu: {
      // 0.5(1 + tanh u) = sigmoid(2u) exactly; this form has no cancellation for x << 0.
      double u = kGeluK * (x + kGeluC * x * x * x);
      return x * sigmoid(2.0 * u);
    }
    case UnaryOp::Silu:
      return x * sigmoid(x);
    case UnaryOp::Scale:
      return alpha * x;
    case UnaryOp::AddScalar:
      return x + alpha;
    case UnaryOp::Pow:
      return std::pow(x, alpha);
  }
  TESSEL_FAIL("unary: unknown op ", int(op));
}

// f'(x).
double unary_derivative(UnaryOp op, double x, double alpha) {
  switch (op) {
    case UnaryOp::Neg:
      return -1.0;
    case UnaryOp::Exp:
      return std::exp(x);
    case UnaryOp::Log:
      return 1.0 / x;
    case UnaryOp::Sqrt:
      return 0.5 / std::sqrt(x);
    case UnaryOp::Rsqrt:
      return -0.5 / (x * std::sqrt(x));
    case UnaryOp::Abs:
      return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
    case UnaryOp::Square:
      return 2.0 * x;
    // 1 - tanh^2 = 1 / cosh^2 and s(1 - s) = s(x) s(-x): no cancellation for large |x|.
    case UnaryOp::Tanh:
      return 1.0 / (std::cosh(x) * std::cosh(x));
    case UnaryOp::Sigmoid:
      return sigmoid(x) * sigmoid(-x);
    case UnaryOp::Relu:
      return x > 0 ? 1.0 : 0.0;
    case UnaryOp::Gelu: {
      // d/dx 0.5x(1 + tanh u) = 0.5(1 + tanh u) + 0.5x(1 - tanh^2 u)u'
      //                       = s + 2x s(1 - s)u' with s = sigmoid(2u), 1 - s = sigmoid(-2u).
      double u = kGeluK * (x + kGeluC * x * x * x);
      double du = kGeluK * (1.0 + 3.0 * kGeluC * x * x);
      double s = sigmoid(2.0 * u);
      return s + 2.0 * x * s * sigmoid(-2.0 * u) * du;
    }
    case UnaryOp::Silu:
      return sigmoid(x) * (1.0 + x * sigmoid(-x));
    case UnaryOp::Scale:
      return alpha;
    case UnaryOp::AddScalar:
      return 1.0;
    case UnaryOp::Pow:
      return alpha == 0 ? 0.0 : alpha * std::pow(x, alpha - 1.0);
  }
  TESSEL_FAIL("unary_backward: unknown op ", int(op));
}

double binary_value(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
    case BinaryOp::Max:
      return std::isnan(a) || std::isnan(b) ? NAN : (a > b ? a : b);
    case BinaryOp::Min:
      return std::isnan(a) || std::isnan(b) ? NAN : (a < b ? a : b);
  }
  TESSEL_FAIL("binary: unknown op ", int(op));
}

// Element offset into t (right-aligned against the output's dims, size-1 dims broadcast) of
// the output element with multi-index `index`.
int64_t broadcast_offset(const Shape& t, const std::vector<int64_t>& index) {
  int skip = int(index.size()) - t.ndim();
  int64_t offset = 0;
  for (int d = 0; d < t.ndim(); ++d) offset = offset * t[d] + (t[d] == 1 ? 0 : index[skip + d]);
  return offset;
}

}  // namespace

void ReferenceBackend::unary(UnaryOp op, const Tensor& x, Tensor& y, double alpha) {
  validate_unary(*this, x, y);
  const double* xp = x.data<double>();
  double* yp = y.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) yp[i] = unary_value(op, xp[i], alpha);
}

void ReferenceBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y,
                                      const Tensor& dy, Tensor& dx, double alpha) {
  validate_unary_backward(*this, x, y, dy, dx);
  const double* xp = x.data<double>();
  const double* dyp = dy.data<double>();
  double* dxp = dx.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) dxp[i] = dyp[i] * unary_derivative(op, xp[i], alpha);
}

void ReferenceBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  validate_binary(*this, op, a, b, out);
  const double* ap = a.data<double>();
  const double* bp = b.data<double>();
  double* op_out = out.data<double>();
  const Shape& shape = out.shape();
  std::vector<int64_t> index(size_t(shape.ndim()), 0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    // Decompose the flat output index into a multi-index (row-major).
    int64_t rest = i;
    for (int d = shape.ndim() - 1; d >= 0; --d) {
      index[size_t(d)] = rest % shape[d];
      rest /= shape[d];
    }
    op_out[i] = binary_value(op, ap[broadcast_offset(a.shape(), index)],
                             bp[broadcast_offset(b.shape(), index)]);
  }
}

}  // namespace tessel::kernels
