// SPDX-License-Identifier: Apache-2.0
// cast forward and backward: both are one conversion kernel of the input's device.
#include "tessel/ops/cast.h"

#include "tessel/ops/common.h"

namespace tessel::ops {

namespace {

Tensor convert(const Tensor& x, DType dtype) {
  Tensor y = empty(x.shape(), dtype, x.device());
  detail::backend(x).convert(x, y);
  return y;
}

class CastBackward final : public autograd::Node {
 public:
  explicit CastBackward(DType input_dtype) : input_dtype_(input_dtype) {}
  std::string_view name() const override { return "cast_backward"; }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {convert(grads[0], input_dtype_)};
  }
  // It saves nothing, so one cast may serve the graphs of several forwards (the weight copies of
  // a pipeline step's micro-batches, or of ZeRO-3's units, are made once per step).
  bool releasable() const override { return false; }

 private:
  DType input_dtype_;
};

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  TESSEL_CHECK(x.defined(), "cast: x is undefined");
  if (x.dtype() == dtype) return x;
  TESSEL_CHECK(dtype_is_float(x.dtype()) && dtype_is_float(dtype), "cast: ", detail::describe(x),
               " to ", dtype_name(dtype),
               ": only floating dtypes convert differentiably (f32, f64, bf16, f16)");
  Tensor y = convert(x, dtype);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<CastBackward>(x.dtype()), {x}, {y});
  return y;
}

}  // namespace tessel::ops

namespace tessel::ops {

Tensor cast_kept(const Tensor& x, const Tensor& kept) {
  TESSEL_CHECK(x.defined() && kept.defined(), "cast_kept: x or kept is undefined");
  TESSEL_CHECK(x.shape() == kept.shape() && dtype_is_float(x.dtype()) &&
                   dtype_is_float(kept.dtype()) && x.dtype() != kept.dtype(),
               "cast_kept: ", detail::describe(x), " kept as ", detail::describe(kept),
               ": expected the same shape in another floating dtype");
  Tensor y = kept.detach();  // a handle of its own: the graph node is this use's, not kept's
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<CastBackward>(x.dtype()), {x}, {y});
  return y;
}

}  // namespace tessel::ops
