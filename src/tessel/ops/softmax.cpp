// SPDX-License-Identifier: Apache-2.0
// Softmax forward and backward; backward needs only the output y (dx = y * (dy - sum(dy * y)),
// or dy - exp(y) * sum(dy) for log-softmax), so y is what the node keeps.
#include "tessel/ops/softmax.h"

#include "tessel/ops/common.h"

namespace tessel::ops {

namespace {

class SoftmaxBackward final : public autograd::Node {
 public:
  SoftmaxBackward(const Tensor& y, bool log) : y_(autograd::saved(y)), log_(log) {}
  std::string_view name() const override {
    return log_ ? "log_softmax_backward" : "softmax_backward";
  }
  void release_saved() override { y_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor dx = empty(y_.shape(), y_.dtype(), y_.device());
    detail::backend(y_).softmax_backward(y_, grads[0], dx, log_);
    return {dx};
  }

 private:
  Tensor y_;
  bool log_;
};

Tensor softmax_impl(const Tensor& x, bool log) {
  std::string_view name = log ? "log_softmax" : "softmax";
  detail::check_float(x, name, "x", kernels::Op::Softmax);
  TESSEL_CHECK(x.ndim() >= 1 && x.size(-1) > 0, name, ": x ", detail::describe(x),
               " needs a non-empty last dim");
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  detail::backend(x).softmax(x, y, log);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<SoftmaxBackward>(y, log), {x}, {y});
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x) {
  return softmax_impl(x, false);
}
Tensor log_softmax(const Tensor& x) {
  return softmax_impl(x, true);
}

}  // namespace tessel::ops
