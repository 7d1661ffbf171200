// SPDX-License-Identifier: Apache-2.0
// Cross-entropy: the fused kernel gives per-row losses (and the log-sum-exp backward reuses);
// the reductions are ordinary differentiable ops on top. dlogits = dloss * (softmax - onehot).
#include "tessel/ops/loss.h"

#include "tessel/ops/common.h"
#include "tessel/ops/elementwise.h"
#include "tessel/ops/reduce.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::ops {

namespace {

class CrossEntropyBackward final : public autograd::Node {
 public:
  CrossEntropyBackward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                       int64_t ignore_index)
      : logits_(autograd::saved(logits)),
        targets_(autograd::saved(targets)),
        lse_(autograd::saved(lse)),
        ignore_index_(ignore_index) {}
  std::string_view name() const override { return "cross_entropy_backward"; }
  void release_saved() override { logits_ = targets_ = lse_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor dlogits = empty(logits_.shape(), logits_.dtype(), logits_.device());
    detail::backend(logits_).cross_entropy_backward(logits_, targets_, lse_, grads[0],
                                                    ignore_index_, dlogits);
    return {dlogits};
  }

 private:
  Tensor logits_, targets_, lse_;
  int64_t ignore_index_;
};

int64_t count_not_ignored(const Tensor& targets, int64_t ignore_index) {
  // Meta targets have no values: a shape-only trace counts every target.
  if (targets.device().is_meta()) return targets.numel();
  // Targets on a CUDA device are counted from a host copy (N ids; the loss is read anyway).
  int64_t count = 0;
  for (int64_t t : to_device(targets, Device::cpu()).to_vector<int64_t>())
    count += t != ignore_index;
  return count;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     Reduction reduction) {
  detail::check_float(logits, "cross_entropy", "logits", kernels::Op::CrossEntropy);
  TESSEL_CHECK(logits.ndim() == 2 && logits.size(1) > 0, "cross_entropy: logits ",
               detail::describe(logits), " must be 2-D [N, V] with V > 0");
  TESSEL_CHECK(
      targets.defined() && (targets.dtype() == DType::I32 || targets.dtype() == DType::I64),
      "cross_entropy: targets ", detail::describe(targets), " must be i32 or i64");
  TESSEL_CHECK(targets.ndim() == 1 && targets.size(0) == logits.size(0), "cross_entropy: targets ",
               detail::describe(targets), " must be [", logits.size(0), "] for logits ",
               detail::describe(logits));
  TESSEL_CHECK(targets.device() == logits.device(), "cross_entropy: targets on ",
               targets.device().str(), ", logits on ", logits.device().str());
  const int64_t n = logits.size(0);
  DType stat = kernels::stat_dtype(logits.dtype());
  Tensor losses = empty({n}, stat, logits.device());
  Tensor lse = empty({n}, stat, logits.device());
  detail::backend(logits).cross_entropy(logits, targets, ignore_index, losses, lse);
  if (autograd::needs_grad({logits}))
    autograd::record(std::make_shared<CrossEntropyBackward>(logits, targets, lse, ignore_index),
                     {logits}, {losses});
  switch (reduction) {
    case Reduction::None:
      return losses;
    case Reduction::Sum:
      return sum(losses);
    case Reduction::Mean:
      break;
  }
  // 1/0 = inf makes an all-ignored batch NaN, as in PyTorch.
  return mul(sum(losses), 1.0 / double(count_not_ignored(targets, ignore_index)));
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  TESSEL_CHECK(input.defined() && target.defined() && input.shape() == target.shape(),
               "mse_loss: input ", detail::describe(input), " and target ",
               detail::describe(target), " must have the same shape");
  Tensor sq = square(sub(input, target));
  switch (reduction) {
    case Reduction::None:
      return sq;
    case Reduction::Sum:
      return sum(sq);
    case Reduction::Mean:
      break;
  }
  return mean(sq);
}

}  // namespace tessel::ops
