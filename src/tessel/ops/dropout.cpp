// SPDX-License-Identifier: Apache-2.0
// Dropout forward and backward: backward applies the same kernel with the same (seed, offset) to
// the gradient, since dy * keep / (1 - p) is exactly dropout(dy).
#include "tessel/ops/dropout.h"

#include "tessel/ops/common.h"
#include "tessel/ops/elementwise.h"

namespace tessel::ops {

namespace {

class DropoutBackward final : public autograd::Node {
 public:
  DropoutBackward(double p, uint64_t seed, uint64_t offset) : p_(p), seed_(seed), offset_(offset) {}
  std::string_view name() const override { return "dropout_backward"; }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor dx = empty(g.shape(), g.dtype(), g.device());
    detail::backend(g).dropout(g, dx, p_, seed_, offset_);
    return {dx};
  }

 private:
  double p_;
  uint64_t seed_, offset_;
};

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  detail::check_float(x, "dropout", "x", kernels::Op::Dropout);
  TESSEL_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability ", p, " is outside [0, 1]");
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);  // every element dropped; 1/(1-p) would be infinite
  Generator& gen = generator ? *generator : default_generator();
  const uint64_t seed = gen.seed();
  const uint64_t offset = gen.reserve(uint64_t(x.numel()));
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  detail::backend(x).dropout(x, y, p, seed, offset);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<DropoutBackward>(p, seed, offset), {x}, {y});
  return y;
}

}  // namespace tessel::ops
