// SPDX-License-Identifier: Apache-2.0
// Element-wise ops and their backward nodes. Binary gradients: d(a+b) = (g, g), d(a-b) = (g, -g),
// d(ab) = (g b, g a), d(a/b) = (g / b, -g a / b^2), each summed back to its operand's shape.
#include "tessel/ops/elementwise.h"

#include <string>

#include "tessel/ops/common.h"

namespace tessel::ops {

using kernels::BinaryOp;
using kernels::UnaryOp;

namespace {

class UnaryBackward final : public autograd::Node {
 public:
  UnaryBackward(UnaryOp op, const Tensor& x, const Tensor& y, double alpha)
      : op_(op),
        x_(autograd::saved(x)),
        y_(autograd::saved(y)),
        alpha_(alpha),
        name_(std::string(kernels::unary_name(op)) + "_backward") {}
  std::string_view name() const override { return name_; }
  void release_saved() override { x_ = y_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor dx = empty(x_.shape(), x_.dtype(), x_.device());
    detail::backend(x_).unary_backward(op_, x_, y_, grads[0], dx, alpha_);
    return {dx};
  }

 private:
  UnaryOp op_;
  Tensor x_, y_;
  double alpha_;
  std::string name_;
};

class BinaryBackward final : public autograd::Node {
 public:
  BinaryBackward(BinaryOp op, const Tensor& a, const Tensor& b)
      : op_(op),
        a_shape_(a.shape()),
        b_shape_(b.shape()),
        name_(std::string(kernels::binary_name(op)) + "_backward") {
    // Only products and quotients need the operands' values.
    if (op == BinaryOp::Mul || op == BinaryOp::Div) {
      a_ = autograd::saved(a);
      b_ = autograd::saved(b);
    }
  }
  std::string_view name() const override { return name_; }
  void release_saved() override { a_ = b_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor da, db;
    switch (op_) {
      case BinaryOp::Add:
        if (needs_input_grad(0)) da = detail::sum_to(g, a_shape_);
        if (needs_input_grad(1)) db = detail::sum_to(g, b_shape_);
        break;
      case BinaryOp::Sub:
        if (needs_input_grad(0)) da = detail::sum_to(g, a_shape_);
        if (needs_input_grad(1)) db = detail::sum_to(detail::unary_raw(UnaryOp::Neg, g), b_shape_);
        break;
      case BinaryOp::Mul:
        if (needs_input_grad(0))
          da = detail::sum_to(detail::binary_raw(BinaryOp::Mul, g, b_), a_shape_);
        if (needs_input_grad(1))
          db = detail::sum_to(detail::binary_raw(BinaryOp::Mul, g, a_), b_shape_);
        break;
      case BinaryOp::Div:
        if (needs_input_grad(0))
          da = detail::sum_to(detail::binary_raw(BinaryOp::Div, g, b_), a_shape_);
        if (needs_input_grad(1)) {
          Tensor num = detail::binary_raw(BinaryOp::Mul, g, a_);
          Tensor den = detail::binary_raw(BinaryOp::Mul, b_, b_);
          db = detail::sum_to(
              detail::unary_raw(UnaryOp::Neg, detail::binary_raw(BinaryOp::Div, num, den)),
              b_shape_);
        }
        break;
      default:
        TESSEL_FAIL("BinaryBackward: no gradient for ", kernels::binary_name(op_));
    }
    return {da, db};
  }

 private:
  BinaryOp op_;
  Shape a_shape_, b_shape_;
  Tensor a_, b_;
  std::string name_;
};

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  std::string_view name = kernels::binary_name(op);
  detail::check_float(a, name, "a", kernels::Op::Binary);
  detail::check_float(b, name, "b", kernels::Op::Binary);
  detail::check_same_kind(a, "a", b, "b", name);
  Tensor out = empty(detail::broadcast_shape(a.shape(), b.shape(), name), a.dtype(), a.device());
  detail::backend(a).binary(op, a, b, out);
  if (autograd::needs_grad({a, b}))
    autograd::record(std::make_shared<BinaryBackward>(op, a, b), {a, b}, {out});
  return out;
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x, double alpha) {
  detail::check_float(x, kernels::unary_name(op), "x", kernels::Op::Unary);
  Tensor y = detail::unary_raw(op, x, alpha);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<UnaryBackward>(op, x, y, alpha), {x}, {y});
  return y;
}

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Add, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Div, a, b);
}

Tensor add(const Tensor& x, double s) {
  return unary(UnaryOp::AddScalar, x, s);
}
Tensor sub(const Tensor& x, double s) {
  return unary(UnaryOp::AddScalar, x, -s);
}
Tensor mul(const Tensor& x, double s) {
  return unary(UnaryOp::Scale, x, s);
}
Tensor div(const Tensor& x, double s) {
  TESSEL_CHECK(s != 0.0, "div: division of ", detail::describe(x), " by the scalar 0");
  return unary(UnaryOp::Scale, x, 1.0 / s);
}

Tensor neg(const Tensor& x) {
  return unary(UnaryOp::Neg, x);
}
Tensor exp(const Tensor& x) {
  return unary(UnaryOp::Exp, x);
}
Tensor log(const Tensor& x) {
  return unary(UnaryOp::Log, x);
}
Tensor sqrt(const Tensor& x) {
  return unary(UnaryOp::Sqrt, x);
}
Tensor rsqrt(const Tensor& x) {
  return unary(UnaryOp::Rsqrt, x);
}
Tensor abs(const Tensor& x) {
  return unary(UnaryOp::Abs, x);
}
Tensor square(const Tensor& x) {
  return unary(UnaryOp::Square, x);
}
Tensor pow(const Tensor& x, double exponent) {
  return unary(UnaryOp::Pow, x, exponent);
}

}  // namespace tessel::ops
