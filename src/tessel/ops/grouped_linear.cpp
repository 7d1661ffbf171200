// SPDX-License-Identifier: Apache-2.0
// grouped_linear: y_g = x_g w_g^T per group; backward dx_g = dy_g w_g (rows form, w not
// transposed) and dw_g = dy_g^T x_g (weight-gradient form over the same row groups).
#include "tessel/ops/grouped_linear.h"

#include "tessel/ops/common.h"

namespace tessel::ops {

namespace {

Tensor grouped(const kernels::GroupedGemmDesc& desc, const Tensor& a, const Tensor& b,
               const Tensor& offsets, const Shape& shape) {
  Tensor c = empty(shape, a.dtype(), a.device());
  detail::backend(a).grouped_gemm(desc, a, b, offsets, c);
  return c;
}

class GroupedLinearBackward final : public autograd::Node {
 public:
  GroupedLinearBackward(const Tensor& x, const Tensor& w, const Tensor& offsets)
      : x_(autograd::saved(x)), w_(autograd::saved(w)), offsets_(offsets) {}
  std::string_view name() const override { return "grouped_linear_backward"; }
  void release_saved() override { x_ = w_ = offsets_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor dx, dw;
    if (needs_input_grad(0)) dx = grouped({false, false}, g, w_, offsets_, x_.shape());
    if (needs_input_grad(1)) dw = grouped({false, true}, g, x_, offsets_, w_.shape());
    return {dx, dw};
  }

 private:
  Tensor x_, w_, offsets_;
};

}  // namespace

Tensor grouped_linear(const Tensor& x, const Tensor& weight, const Tensor& offsets) {
  detail::check_float(x, "grouped_linear", "x", kernels::Op::GroupedGemm);
  detail::check_float(weight, "grouped_linear", "weight", kernels::Op::GroupedGemm);
  detail::check_same_kind(x, "x", weight, "weight", "grouped_linear");
  TESSEL_CHECK(x.ndim() == 2, "grouped_linear: x ", detail::describe(x), " must be 2-D [rows, in]");
  TESSEL_CHECK(weight.ndim() == 3 && weight.size(2) == x.size(1), "grouped_linear: weight ",
               detail::describe(weight), " must be [groups, out, ", x.size(1), "] for x ",
               detail::describe(x));
  detail::check_group_offsets(offsets, weight.size(0), x.size(0), weight, "grouped_linear");
  // A copy keeps the offsets from changing before backward.
  Tensor off = offsets.clone();
  Tensor y = grouped({true, false}, x, weight, off, Shape{x.size(0), weight.size(1)});
  if (autograd::needs_grad({x, weight}))
    autograd::record(std::make_shared<GroupedLinearBackward>(x, weight, off), {x, weight}, {y});
  return y;
}

}  // namespace tessel::ops
