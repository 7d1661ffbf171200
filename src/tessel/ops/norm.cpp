// SPDX-License-Identifier: Apache-2.0
// LayerNorm and RMSNorm forward and backward; the forward saves the per-row statistics (mean,
// rstd) so backward does not recompute them.
#include "tessel/ops/norm.h"

#include "tessel/ops/common.h"

namespace tessel::ops {

namespace {

int64_t rows_of(const Tensor& x) {
  return x.numel() / x.size(-1);
}

void check_affine(const Tensor& x, const Tensor& p, std::string_view op, std::string_view what) {
  if (!p.defined()) return;
  detail::check_same_kind(x, "x", p, what, op);
  TESSEL_CHECK(p.ndim() == 1 && p.size(0) == x.size(-1), op, ": ", what, " ", detail::describe(p),
               " must be [", x.size(-1), "] to match the last dim of x ", detail::describe(x));
}

class LayerNormBackward final : public autograd::Node {
 public:
  LayerNormBackward(const Tensor& x, const Tensor& w, bool has_bias, const Tensor& mean,
                    const Tensor& rstd)
      : x_(autograd::saved(x)),
        w_(autograd::saved(w)),
        mean_(autograd::saved(mean)),
        rstd_(autograd::saved(rstd)),
        has_bias_(has_bias) {}
  std::string_view name() const override { return "layer_norm_backward"; }
  void release_saved() override { x_ = w_ = mean_ = rstd_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor dx = empty(x_.shape(), x_.dtype(), x_.device());
    // The kernel writes the affine gradients whenever the parameters exist.
    Tensor dw = w_.defined() ? empty(w_.shape(), w_.dtype(), w_.device()) : Tensor();
    Tensor db = has_bias_ ? empty({x_.size(-1)}, x_.dtype(), x_.device()) : Tensor();
    detail::backend(x_).layer_norm_backward(grads[0], x_, w_, mean_, rstd_, dx, dw, db);
    return {dx, dw, db};
  }

 private:
  Tensor x_, w_, mean_, rstd_;
  bool has_bias_;
};

class RmsNormBackward final : public autograd::Node {
 public:
  RmsNormBackward(const Tensor& x, const Tensor& w, const Tensor& rstd)
      : x_(autograd::saved(x)), w_(autograd::saved(w)), rstd_(autograd::saved(rstd)) {}
  std::string_view name() const override { return "rms_norm_backward"; }
  void release_saved() override { x_ = w_ = rstd_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor dx = empty(x_.shape(), x_.dtype(), x_.device());
    Tensor dw = empty(w_.shape(), w_.dtype(), w_.device());
    detail::backend(x_).rms_norm_backward(grads[0], x_, w_, rstd_, dx, dw);
    return {dx, dw};
  }

 private:
  Tensor x_, w_, rstd_;
};

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  detail::check_float(x, "layer_norm", "x", kernels::Op::LayerNorm);
  TESSEL_CHECK(x.ndim() >= 1 && x.size(-1) > 0, "layer_norm: x ", detail::describe(x),
               " needs a non-empty last dim");
  check_affine(x, weight, "layer_norm", "weight");
  check_affine(x, bias, "layer_norm", "bias");
  TESSEL_CHECK(eps >= 0.0, "layer_norm: eps ", eps, " must be >= 0");
  DType stat = kernels::stat_dtype(x.dtype());
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  Tensor mean = empty({rows_of(x)}, stat, x.device());
  Tensor rstd = empty({rows_of(x)}, stat, x.device());
  detail::backend(x).layer_norm(x, weight, bias, eps, y, mean, rstd);
  if (autograd::needs_grad({x, weight, bias})) {
    auto node = std::make_shared<LayerNormBackward>(x, weight, bias.defined(), mean, rstd);
    autograd::record(node, {x, weight, bias}, {y});
  }
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  detail::check_float(x, "rms_norm", "x", kernels::Op::RmsNorm);
  TESSEL_CHECK(x.ndim() >= 1 && x.size(-1) > 0, "rms_norm: x ", detail::describe(x),
               " needs a non-empty last dim");
  TESSEL_CHECK(weight.defined(), "rms_norm: weight is undefined");
  check_affine(x, weight, "rms_norm", "weight");
  TESSEL_CHECK(eps >= 0.0, "rms_norm: eps ", eps, " must be >= 0");
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = empty({rows_of(x)}, kernels::stat_dtype(x.dtype()), x.device());
  detail::backend(x).rms_norm(x, weight, eps, y, rstd);
  if (autograd::needs_grad({x, weight}))
    autograd::record(std::make_shared<RmsNormBackward>(x, weight, rstd), {x, weight}, {y});
  return y;
}

}  // namespace tessel::ops
