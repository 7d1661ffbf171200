// SPDX-License-Identifier: Apache-2.0
// The LLaMA decoder layer: attention with RoPE and grouped-query heads, the SwiGLU MLP, the
// pre-norm residual wiring and the layer's activation recomputation modes.
#include "tessel/models/llama/llama_block.h"

#include "tessel/autograd/checkpoint.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/kernels/backend.h"
#include "tessel/ops/ops.h"

namespace tessel::models {

LlamaAttention::LlamaAttention(const LlamaConfig& config, std::shared_ptr<RotaryTables> rope,
                               nn::Init init)
    : nn::Module("LlamaAttention"),
      head_dim_(config.head_dim),
      window_(config.window()),
      rope_(std::move(rope)) {
  const int64_t c = config.hidden;
  const bool bias = config.qkv_bias();
  q_proj = register_module("q_proj", std::make_shared<nn::Linear>(c, config.q_width(), bias, init));
  k_proj =
      register_module("k_proj", std::make_shared<nn::Linear>(c, config.kv_width(), bias, init));
  v_proj =
      register_module("v_proj", std::make_shared<nn::Linear>(c, config.kv_width(), bias, init));
  o_proj = register_module(
      "o_proj", std::make_shared<nn::Linear>(config.q_width(), c, config.o_bias(), init));
}

LlamaAttention::Projected LlamaAttention::project(const Tensor& x, int64_t start) {
  // Under sequence parallelism x is this rank's piece of the sequence and the Colwise
  // projections gather it: the length is the projections' (x.size(1) may be smaller).
  return project(x, Tensor(), start);
}

LlamaAttention::Projected LlamaAttention::project(const Tensor& x, const Tensor& positions,
                                                  int64_t position_end) {
  Tensor q = q_proj->forward(x), k = k_proj->forward(x), v = v_proj->forward(x);
  const int64_t b = q.size(0), t = q.size(1), d = head_dim_;
  const int64_t heads = q.size(2) / d, kv_heads = k.size(2) / d;
  TESSEL_CHECK(q.ndim() == 3 && q.size(2) == heads * d && k.size(2) == kv_heads * d &&
                   v.shape() == k.shape() && kv_heads >= 1 && heads % kv_heads == 0,
               "LlamaAttention: q ", q.shape(), ", k ", k.shape(), ", v ", v.shape(),
               " are not whole heads of ", d, " with query heads a multiple of KV heads");
  // Without explicit positions, position_end is the start of a contiguous run.
  const bool contiguous = !positions.defined();
  auto [cos, sin] = rope_->get(contiguous ? position_end + t : position_end,
                               kernels::stat_dtype(q.dtype()), q.device());
  const Tensor pos = contiguous ? rope_positions(b, t, position_end, q.device()) : positions;
  Projected p;
  p.q = ops::rope(ops::reshape(q, {b, t, heads, d}), cos, sin, pos);
  p.k = ops::rope(ops::reshape(k, {b, t, kv_heads, d}), cos, sin, pos);
  p.v = ops::reshape(v, {b, t, kv_heads, d});
  tap("q", p.q);
  tap("k", p.k);
  tap("v", p.v);
  return p;
}

Tensor LlamaAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v) const {
  // A query at position p sees keys p - window < j <= p (all j <= p without a window).
  return ops::attention(q, k, v, /*causal=*/true, Tensor(), 0.0, window_);
}

Tensor LlamaAttention::core(const Tensor& x) {
  Projected p = project(x, 0);
  const int64_t b = p.q.size(0), t = p.q.size(1);
  Tensor y = ops::reshape(attend(p.q, p.k, p.v), {b, t, p.q.size(2) * head_dim_});
  tap("y", y);
  return y;
}

Tensor LlamaAttention::forward(const Tensor& x) {
  return run_forward({x}, [&] { return o_proj->forward(core(x)); });
}

Tensor LlamaAttention::forward_recomputed(const Tensor& x, nn::RMSNorm& norm) {
  return run_forward({x}, [&] {
    nn::RMSNorm* n = &norm;
    // Nothing random runs inside, so the default generator checkpoint restores is enough.
    Tensor y = autograd::checkpoint(
        [this, n](const std::vector<Tensor>& in) { return core(n->forward(in[0])); }, {x});
    return o_proj->forward(y);
  });
}

LlamaMLP::LlamaMLP(const LlamaConfig& config, nn::Init init) : nn::Module("LlamaMLP") {
  const int64_t c = config.hidden, i = config.intermediate_size;
  const bool bias = config.mlp_biases();
  gate_proj = register_module("gate_proj", std::make_shared<nn::Linear>(c, i, bias, init));
  up_proj = register_module("up_proj", std::make_shared<nn::Linear>(c, i, bias, init));
  down_proj = register_module("down_proj", std::make_shared<nn::Linear>(i, c, bias, init));
}

Tensor LlamaMLP::forward(const Tensor& x) {
  return run_forward({x}, [&] {
    Tensor h = ops::mul(ops::silu(gate_proj->forward(x)), up_proj->forward(x));
    tap("act", h);
    return down_proj->forward(h);
  });
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& config, std::shared_ptr<RotaryTables> rope,
                                     nn::Init init)
    : nn::Module("LlamaDecoderLayer") {
  input_layernorm = register_module(
      "input_layernorm", std::make_shared<nn::RMSNorm>(config.hidden, config.rms_norm_eps, init));
  self_attn =
      register_module("self_attn", std::make_shared<LlamaAttention>(config, std::move(rope), init));
  post_attention_layernorm =
      register_module("post_attention_layernorm",
                      std::make_shared<nn::RMSNorm>(config.hidden, config.rms_norm_eps, init));
  if (config.is_moe()) {
    block_sparse_moe =
        register_module("block_sparse_moe", std::make_shared<nn::MoE>(config.moe_config(), init));
  } else {
    mlp = register_module("mlp", std::make_shared<LlamaMLP>(config, init));
  }
}

void LlamaDecoderLayer::set_recompute(nn::Recompute mode) {
  TESSEL_CHECK(!block_sparse_moe || mode != nn::Recompute::Full,
               "LlamaDecoderLayer: recompute 'full' is not supported with mixture-of-experts "
               "layers (the replay would route again and drop the auxiliary loss's gradient); "
               "use 'selective' or 'none'");
  recompute_ = mode;
}

Tensor LlamaDecoderLayer::feed_forward(const Tensor& x) {
  if (!block_sparse_moe) return mlp->forward(x);
  nn::MoE::Output out = block_sparse_moe->forward(x);
  aux_loss_ = out.aux_loss;
  return out.output;
}

Tensor LlamaDecoderLayer::forward(const Tensor& x) {
  return run_forward({x}, [&] {
    // Without recording there is nothing to keep, so every mode runs the layer once.
    if (recompute_ != nn::Recompute::Full || !autograd::grad_enabled()) return body(x);
    return autograd::checkpoint([this](const std::vector<Tensor>& in) { return body(in[0]); }, {x});
  });
}

Tensor LlamaDecoderLayer::body(const Tensor& x) {
  const bool selective = recompute_ == nn::Recompute::Selective && autograd::grad_enabled();
  Tensor a = selective ? self_attn->forward_recomputed(x, *input_layernorm)
                       : self_attn->forward(input_layernorm->forward(x));
  Tensor h = ops::add(x, a);
  tap("resid_attn", h);
  return ops::add(h, feed_forward(post_attention_layernorm->forward(h)));
}

}  // namespace tessel::models
