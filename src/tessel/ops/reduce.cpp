// SPDX-License-Identifier: Apache-2.0
// Reductions and their backward nodes: sum and mean broadcast the gradient back; max and min send
// it to the elements equal to the result (a host loop: the backend has no arg-reduction yet).
#include "tessel/ops/reduce.h"

#include <algorithm>
#include <string>

#include "tessel/ops/common.h"
#include "tessel/tensor/meta_copy.h"

namespace tessel::ops {

using kernels::ReduceOp;

namespace {

// dx[i] = dy[o(i)] / ties[o(i)] where x[i] == y[o(i)], else 0; o maps x's index to the
// keepdim output's index.
template <typename T>
void extremum_backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  const Shape& xs = x.shape();
  const int n = xs.ndim();
  std::vector<int64_t> ystride = y.shape().strides();
  for (int d = 0; d < n; ++d)
    if (y.size(d) == 1) ystride[size_t(d)] = 0;
  const T* xp = x.data<T>();
  const T* yp = y.data<T>();
  const T* gp = dy.data<T>();
  T* dp = dx.data<T>();
  auto for_each = [&](auto&& fn) {
    std::vector<int64_t> idx(size_t(n), 0);
    int64_t o = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      fn(i, o);
      for (int d = n - 1; d >= 0; --d) {
        o += ystride[size_t(d)];
        if (++idx[size_t(d)] < xs[d]) break;
        o -= ystride[size_t(d)] * xs[d];
        idx[size_t(d)] = 0;
      }
    }
  };
  std::vector<int64_t> ties(size_t(y.numel()), 0);
  for_each([&](int64_t i, int64_t o) { ties[size_t(o)] += xp[i] == yp[o]; });
  for_each(
      [&](int64_t i, int64_t o) { dp[i] = xp[i] == yp[o] ? gp[o] / T(ties[size_t(o)]) : T(0); });
}

class ReduceBackward final : public autograd::Node {
 public:
  // x is the input as reduced (a 0-d input viewed as [1]); grads go back as `input_shape`.
  ReduceBackward(ReduceOp op, const Tensor& x, const Tensor& y_keep, std::vector<int> dims,
                 const Shape& input_shape)
      : op_(op),
        x_shape_(x.shape()),
        input_shape_(input_shape),
        keep_shape_(y_keep.shape()),
        dims_(std::move(dims)),
        name_(std::string(kernels::reduce_name(op)) + "_backward") {
    if (op == ReduceOp::Max || op == ReduceOp::Min) {
      x_ = autograd::saved(x);
      y_ = autograd::saved(y_keep);
    }
  }
  std::string_view name() const override { return name_; }
  void release_saved() override { x_ = y_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor g = grads[0].reshape(keep_shape_);
    switch (op_) {
      case ReduceOp::Sum:
        return {detail::expand_to(g, x_shape_).reshape(input_shape_)};
      case ReduceOp::Mean: {
        int64_t count = 1;
        for (int d : dims_) count *= x_shape_[d];
        Tensor scaled = detail::unary_raw(kernels::UnaryOp::Scale, g, 1.0 / double(count));
        return {detail::expand_to(scaled, x_shape_).reshape(input_shape_)};
      }
      default: {
        Tensor dx = empty(x_shape_, x_.dtype(), x_.device());
        if (x_.device().is_meta()) {
          // Shape-only: the ties are data; reported as the pass over x, y and dy it is.
          report_meta_copy("extremum_backward", {x_, y_, g}, {dx});
          return {dx.reshape(input_shape_)};
        }
        TESSEL_CHECK(x_.device().is_cpu(), name_, ": only cpu tensors are supported");
        if (x_.dtype() == DType::F64) {
          extremum_backward<double>(x_, y_, g, dx);
        } else {
          TESSEL_CHECK(x_.dtype() == DType::F32, name_, ": unsupported dtype ",
                       dtype_name(x_.dtype()));
          extremum_backward<float>(x_, y_, g, dx);
        }
        return {dx.reshape(input_shape_)};
      }
    }
  }

 private:
  ReduceOp op_;
  Shape x_shape_, input_shape_, keep_shape_;
  std::vector<int> dims_;
  Tensor x_, y_;
  std::string name_;
};

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  std::string_view name = kernels::reduce_name(op);
  detail::check_float(x, name, "x", kernels::Op::Reduce);
  // A 0-d input is reduced as a one-element vector.
  Tensor input = x.ndim() == 0 ? x.reshape({1}) : x;
  std::vector<int> d = detail::reduce_dims(x.shape(), dims, name);
  if (x.ndim() == 0) d = {0};
  for (int dim : d)
    TESSEL_CHECK(input.size(dim) > 0 || op == ReduceOp::Sum || op == ReduceOp::Mean, name,
                 ": reducing the empty dim ", dim, " of ", input.shape(), " has no result");
  Shape keep = detail::keepdim_shape(input.shape(), d);
  Tensor y = empty(keep, x.dtype(), x.device());
  detail::backend(x).reduce(op, input, d, y);
  Shape out_shape;
  if (x.ndim() > 0) {
    for (int i = 0; i < input.ndim(); ++i)
      if (keepdim || std::find(d.begin(), d.end(), i) == d.end()) out_shape.push_back(keep[i]);
  }
  Tensor out = y.reshape(out_shape);  // a fresh handle either way
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<ReduceBackward>(op, input, y, d, x.shape()), {x}, {out});
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return reduce(ReduceOp::Sum, x, dims, keepdim);
}
Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return reduce(ReduceOp::Mean, x, dims, keepdim);
}
Tensor max(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return reduce(ReduceOp::Max, x, dims, keepdim);
}
Tensor min(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return reduce(ReduceOp::Min, x, dims, keepdim);
}

}  // namespace tessel::ops
