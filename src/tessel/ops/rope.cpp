// SPDX-License-Identifier: Apache-2.0
// Rotary position embedding forward and backward. A rotation is orthogonal, so the gradient of
// y = R x is R^T dy = the rotation by the opposite angle: the same kernel with `inverse`.
#include "tessel/ops/rope.h"

#include "tessel/ops/common.h"

namespace tessel::ops {

namespace {

class RopeBackward final : public autograd::Node {
 public:
  RopeBackward(const Tensor& cos, const Tensor& sin, const Tensor& positions)
      : cos_(autograd::saved(cos)), sin_(autograd::saved(sin)), pos_(autograd::saved(positions)) {}
  std::string_view name() const override { return "rope_backward"; }
  void release_saved() override { cos_ = sin_ = pos_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor dx = empty(g.shape(), g.dtype(), g.device());
    detail::backend(g).rope(g, cos_, sin_, pos_, /*inverse=*/true, dx);
    return {dx};
  }

 private:
  Tensor cos_, sin_, pos_;
};

}  // namespace

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions) {
  detail::check_float(x, "rope", "x", kernels::Op::Rope);
  TESSEL_CHECK(x.ndim() == 4, "rope: x ", detail::describe(x), " must be 4-D [B, T, H, D]");
  TESSEL_CHECK(cos.defined() && sin.defined() && positions.defined(),
               "rope: cos, sin and positions must be defined");
  for (const auto* t : {&cos, &sin, &positions})
    TESSEL_CHECK(t->device() == x.device(), "rope: x on ", x.device().str(), ", ",
                 t == &positions ? "positions"
                 : t == &cos     ? "cos"
                                 : "sin",
                 " on ", t->device().str());
  // The kernel checks the shapes, the table dtype and every position (errors name "rope").
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  detail::backend(x).rope(x, cos, sin, positions, /*inverse=*/false, out);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<RopeBackward>(cos, sin, positions), {x}, {out});
  return out;
}

}  // namespace tessel::ops
