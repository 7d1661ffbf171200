// SPDX-License-Identifier: Apache-2.0
// linear and matmul, one GEMM each way. For y = x w^T: dx = dy w, dw = dy^T x (summed over all
// rows by the GEMM itself), db = sum of dy over rows. For c = a b: da = dc b^T, db = a^T dc.
#include "tessel/ops/matmul.h"

#include "tessel/ops/common.h"

namespace tessel::ops {

using kernels::dense_gemm_desc;

namespace {

int64_t batch_of(const Tensor& a) {
  int64_t batch = 1;
  for (int i = 0; i < a.ndim() - 2; ++i) batch *= a.size(i);
  return batch;
}

// All dims but the last, flattened.
int64_t rows_of(const Tensor& x) {
  int64_t rows = 1;
  for (int i = 0; i < x.ndim() - 1; ++i) rows *= x.size(i);
  return rows;
}

Tensor gemm(const kernels::GemmDesc& desc, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor c = empty(shape, a.dtype(), a.device());
  detail::backend(a).gemm(desc, a, b, c);
  return c;
}

class LinearBackward final : public autograd::Node {
 public:
  LinearBackward(const Tensor& x, const Tensor& w)
      : x_(autograd::saved(x)), w_(autograd::saved(w)) {}
  std::string_view name() const override { return "linear_backward"; }
  void release_saved() override { x_ = w_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const int64_t in = w_.size(1), out = w_.size(0), rows = rows_of(x_);
    const Tensor& g = grads[0];
    Tensor dx, dw, db;
    if (needs_input_grad(0))
      dx = gemm(dense_gemm_desc(1, rows, in, out, false, false), g, w_, x_.shape());
    if (needs_input_grad(1))
      dw = gemm(dense_gemm_desc(1, out, in, rows, true, false), g, x_, w_.shape());
    if (needs_input_grad(2)) db = detail::sum_to(g.reshape({rows, out}), Shape{out});
    return {dx, dw, db};
  }

 private:
  Tensor x_, w_;
};

class MatmulBackward final : public autograd::Node {
 public:
  MatmulBackward(const Tensor& a, const Tensor& b)
      : a_(autograd::saved(a)), b_(autograd::saved(b)) {}
  std::string_view name() const override { return "matmul_backward"; }
  void release_saved() override { a_ = b_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    const int64_t m = a_.size(-2), k = a_.size(-1), n = b_.size(-1);
    Tensor da, db;
    if (b_.ndim() == 2) {
      // Every batch entry shares b: treat a as one [rows, k] matrix.
      const int64_t rows = batch_of(a_) * m;
      if (needs_input_grad(0))
        da = gemm(dense_gemm_desc(1, rows, k, n, false, true), g, b_, a_.shape());
      if (needs_input_grad(1))
        db = gemm(dense_gemm_desc(1, k, n, rows, true, false), a_, g, b_.shape());
    } else {
      const int64_t batch = batch_of(a_);
      if (needs_input_grad(0))
        da = gemm(dense_gemm_desc(batch, m, k, n, false, true), g, b_, a_.shape());
      if (needs_input_grad(1))
        db = gemm(dense_gemm_desc(batch, k, n, m, true, false), a_, g, b_.shape());
    }
    return {da, db};
  }

 private:
  Tensor a_, b_;
};

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_float(x, "linear", "x", kernels::Op::Gemm);
  detail::check_float(weight, "linear", "weight", kernels::Op::Gemm);
  detail::check_same_kind(x, "x", weight, "weight", "linear");
  TESSEL_CHECK(weight.ndim() == 2, "linear: weight ", detail::describe(weight),
               " must be 2-D [out_features, in_features]");
  TESSEL_CHECK(x.ndim() >= 1 && x.size(-1) == weight.size(1), "linear: x ", detail::describe(x),
               " has ", x.ndim() >= 1 ? x.size(-1) : 0, " input features, weight ",
               detail::describe(weight), " expects ", weight.size(1));
  const int64_t in = weight.size(1), out = weight.size(0), rows = rows_of(x);
  if (bias.defined()) {
    detail::check_same_kind(x, "x", bias, "bias", "linear");
    TESSEL_CHECK(bias.ndim() == 1 && bias.size(0) == out, "linear: bias ", detail::describe(bias),
                 " must be [", out, "] for weight ", detail::describe(weight));
  }
  Tensor y =
      gemm(dense_gemm_desc(1, rows, out, in, false, true), x, weight, x.shape().with(-1, out));
  // y is fresh and ours alone: the bias goes in place, saving a [rows, out] buffer per layer.
  if (bias.defined()) detail::backend(y).binary(kernels::BinaryOp::Add, y, bias, y);
  if (autograd::needs_grad({x, weight, bias}))
    autograd::record(std::make_shared<LinearBackward>(x, weight), {x, weight, bias}, {y});
  return y;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_float(a, "matmul", "a", kernels::Op::Gemm);
  detail::check_float(b, "matmul", "b", kernels::Op::Gemm);
  detail::check_same_kind(a, "a", b, "b", "matmul");
  TESSEL_CHECK(a.ndim() >= 2 && b.ndim() >= 2, "matmul: a ", detail::describe(a), " and b ",
               detail::describe(b), " must both have at least 2 dims");
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  TESSEL_CHECK(b.size(-2) == k, "matmul: inner sizes differ: a ", detail::describe(a),
               " has k = ", k, ", b ", detail::describe(b), " has k = ", b.size(-2));
  Shape out_shape = a.shape().with(-1, n);
  Tensor c;
  if (b.ndim() == 2) {
    c = gemm(dense_gemm_desc(1, batch_of(a) * m, n, k, false, false), a, b, out_shape);
  } else {
    bool same_batch = a.ndim() == b.ndim();
    for (int i = 0; same_batch && i < a.ndim() - 2; ++i) same_batch = a.size(i) == b.size(i);
    TESSEL_CHECK(same_batch, "matmul: batch dims of a ", detail::describe(a), " and b ",
                 detail::describe(b), " differ (b must have a's batch dims or be 2-D)");
    c = gemm(dense_gemm_desc(batch_of(a), m, n, k, false, false), a, b, out_shape);
  }
  if (autograd::needs_grad({a, b}))
    autograd::record(std::make_shared<MatmulBackward>(a, b), {a, b}, {c});
  return c;
}

}  // namespace tessel::ops
