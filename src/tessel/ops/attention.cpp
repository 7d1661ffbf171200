// SPDX-License-Identifier: Apache-2.0
// Attention forward and backward through the backend's fused kernels; the forward's per-row
// log-sum-exp is saved so backward recomputes probabilities without a second softmax pass
// (the FlashAttention recipe).
#include "tessel/ops/attention.h"

#include <cmath>

#include "tessel/ops/common.h"

namespace tessel::ops {

namespace {

class AttentionBackward final : public autograd::Node {
 public:
  AttentionBackward(const kernels::AttentionDesc& desc, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& mask, const Tensor& out, const Tensor& lse)
      : desc_(desc),
        q_(autograd::saved(q)),
        k_(autograd::saved(k)),
        v_(autograd::saved(v)),
        mask_(autograd::saved(mask)),
        out_(autograd::saved(out)),
        lse_(autograd::saved(lse)) {}
  std::string_view name() const override { return "attention_backward"; }
  void release_saved() override { q_ = k_ = v_ = mask_ = out_ = lse_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor dq = empty(q_.shape(), q_.dtype(), q_.device());
    Tensor dk = empty(k_.shape(), k_.dtype(), k_.device());
    Tensor dv = empty(v_.shape(), v_.dtype(), v_.device());
    detail::backend(q_).attention_backward(desc_, q_, k_, v_, mask_, out_, lse_, grads[0], dq, dk,
                                           dv);
    return {dq, dk, dv};
  }

 private:
  kernels::AttentionDesc desc_;
  Tensor q_, k_, v_, mask_, out_, lse_;
};

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionOptions& options) {
  return attention(q, k, v, options.causal, options.mask, options.scale, options.window);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& mask,
                 double scale, int64_t window) {
  detail::check_float(q, "attention", "q", kernels::Op::Attention);
  detail::check_same_kind(q, "q", k, "k", "attention");
  detail::check_same_kind(q, "q", v, "v", "attention");
  TESSEL_CHECK(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4, "attention: q ",
               detail::describe(q), ", k ", detail::describe(k), ", v ", detail::describe(v),
               " must all be 4-D [B, T, H, D]");
  TESSEL_CHECK(k.shape() == v.shape(), "attention: k ", detail::describe(k), " and v ",
               detail::describe(v), " must have the same shape");
  TESSEL_CHECK(k.size(0) == q.size(0) && k.size(3) == q.size(3), "attention: q ",
               detail::describe(q), " and k ", detail::describe(k), " differ in batch or head dim");
  TESSEL_CHECK(q.size(3) > 0, "attention: head dim of q ", detail::describe(q), " is 0");
  TESSEL_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0, "attention: q has ", q.size(2),
               " heads, which k's ", k.size(2), " heads must divide");
  if (mask.defined()) {
    TESSEL_CHECK(mask.dtype() == DType::I8 && mask.ndim() == 2 && mask.size(0) == q.size(0) &&
                     mask.size(1) == k.size(1),
                 "attention: mask ", detail::describe(mask), " must be i8 [", q.size(0), ", ",
                 k.size(1), "]");
  }
  TESSEL_CHECK(scale >= 0.0, "attention: scale ", scale, " must be >= 0 (0 = 1/sqrt(D))");
  TESSEL_CHECK(window >= 0, "attention: window ", window, " must be >= 0 (0 = unlimited)");
  TESSEL_CHECK(window == 0 || causal, "attention: window ", window,
               " needs causal attention (a sliding window counts back from each query's "
               "position)");
  kernels::AttentionDesc desc;
  desc.batch = q.size(0);
  desc.q_len = q.size(1);
  desc.kv_len = k.size(1);
  desc.heads = q.size(2);
  desc.kv_heads = k.size(2);
  desc.head_dim = q.size(3);
  desc.causal = causal;
  desc.window = window;
  desc.scale = scale > 0.0 ? scale : 1.0 / std::sqrt(double(q.size(3)));
  Tensor out = empty(q.shape(), q.dtype(), q.device());
  Tensor lse =
      empty({desc.batch, desc.heads, desc.q_len}, kernels::stat_dtype(q.dtype()), q.device());
  detail::backend(q).attention(desc, q, k, v, mask, out, lse);
  if (autograd::needs_grad({q, k, v}))
    autograd::record(std::make_shared<AttentionBackward>(desc, q, k, v, mask, out, lse), {q, k, v},
                     {out});
  return out;
}

}  // namespace tessel::ops
