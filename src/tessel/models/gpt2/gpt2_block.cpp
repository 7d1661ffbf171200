// SPDX-License-Identifier: Apache-2.0
// GPT-2's transformer block: causal self-attention, GPT2MLP and the pre-LN residual wiring, and the
// block's activation recomputation modes.
#include "tessel/models/gpt2/gpt2_block.h"

#include <cmath>

#include "tessel/autograd/checkpoint.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/ops/ops.h"

namespace tessel::models {

namespace {

// GPT-2 scales the init of projections that add into the residual stream by 1/sqrt(2 n_layer).
nn::Init residual_init(const GPT2BlockConfig& c, nn::Init init) {
  init.std /= std::sqrt(2.0 * double(c.n_layer));
  return init;
}

}  // namespace

void GPT2BlockConfig::validate() const {
  TESSEL_CHECK(n_embd > 0 && n_head > 0, "GPT2BlockConfig: n_embd=", n_embd, " n_head=", n_head,
               " must be positive");
  TESSEL_CHECK(n_embd % n_head == 0, "GPT2BlockConfig: n_embd ", n_embd,
               " is not divisible by n_head ", n_head);
  TESSEL_CHECK(n_inner >= 0, "GPT2BlockConfig: n_inner ", n_inner,
               " must be >= 0 (0 = 4 * n_embd)");
  TESSEL_CHECK(n_layer > 0, "GPT2BlockConfig: n_layer ", n_layer, " must be positive");
  TESSEL_CHECK(layer_norm_epsilon >= 0, "GPT2BlockConfig: layer_norm_epsilon ", layer_norm_epsilon,
               " must be >= 0");
  TESSEL_CHECK(resid_pdrop >= 0 && resid_pdrop < 1, "GPT2BlockConfig: resid_pdrop ", resid_pdrop,
               " must be in [0, 1)");
}

GPT2Attention::GPT2Attention(const GPT2BlockConfig& config, nn::Init init)
    : nn::Module("GPT2Attention"), n_embd_(config.n_embd), n_head_(config.n_head) {
  config.validate();
  c_attn = register_module(
      "c_attn", std::make_shared<nn::Linear>(config.n_embd, 3 * config.n_embd, config.bias, init));
  c_proj = register_module("c_proj",
                           std::make_shared<nn::Linear>(config.n_embd, config.n_embd, config.bias,
                                                        residual_init(config, init)));
  resid_dropout = register_module(
      "resid_dropout", std::make_shared<nn::Dropout>(config.resid_pdrop, init.generator));
}

Tensor GPT2Attention::forward(const Tensor& x) {
  return run_forward({x}, [&] {
    TESSEL_CHECK(x.ndim() == 3 && x.size(2) == n_embd_, "GPT2Attention: input shape ", x.shape(),
                 " expected [B, T, ", n_embd_, "]");
    return resid_dropout->forward(c_proj->forward(core(c_attn->forward(x))));
  });
}

Tensor GPT2Attention::forward_recomputed(const Tensor& x, nn::LayerNorm& norm) {
  return run_forward({x}, [&] {
    TESSEL_CHECK(x.ndim() == 3 && x.size(2) == n_embd_, "GPT2Attention: input shape ", x.shape(),
                 " expected [B, T, ", n_embd_, "]");
    nn::LayerNorm* n = &norm;
    // No dropout runs inside, so the default generator checkpoint always restores is enough.
    Tensor y = autograd::checkpoint(
        [this, n](const std::vector<Tensor>& in) {
          return core(c_attn->forward(n->forward(in[0])));
        },
        {x});
    return resid_dropout->forward(c_proj->forward(y));
  });
}

Tensor GPT2Attention::core(const Tensor& qkv) {
  // The head count follows qkv's width: n_head serially, this rank's n_head / tp heads when
  // c_attn is split per head by tensor parallelism (parallel/tensor/plan.h), with no other change.
  const int64_t b = qkv.size(0), t = qkv.size(1), d = n_embd_ / n_head_;
  const int64_t c = qkv.size(2) / 3, heads = c / d;
  TESSEL_CHECK(qkv.ndim() == 3 && qkv.size(2) == 3 * heads * d && heads >= 1, "GPT2Attention: qkv ",
               qkv.shape(), " is not [B, T, 3 x heads x ", d, "]");
  std::vector<Tensor> parts = ops::split(qkv, {c, c, c}, -1);
  Tensor q = ops::reshape(parts[0], {b, t, heads, d});
  Tensor k = ops::reshape(parts[1], {b, t, heads, d});
  Tensor v = ops::reshape(parts[2], {b, t, heads, d});
  tap("q", q);
  tap("k", k);
  tap("v", v);
  Tensor y = ops::reshape(ops::attention(q, k, v, /*causal=*/true), {b, t, c});
  tap("y", y);
  return y;
}

GPT2MLP::GPT2MLP(const GPT2BlockConfig& config, nn::Init init) : nn::Module("GPT2MLP") {
  config.validate();
  c_fc = register_module(
      "c_fc", std::make_shared<nn::Linear>(config.n_embd, config.inner(), config.bias, init));
  c_proj = register_module("c_proj",
                           std::make_shared<nn::Linear>(config.inner(), config.n_embd, config.bias,
                                                        residual_init(config, init)));
  dropout =
      register_module("dropout", std::make_shared<nn::Dropout>(config.resid_pdrop, init.generator));
}

Tensor GPT2MLP::forward(const Tensor& x) {
  return run_forward({x}, [&] {
    Tensor h = ops::gelu(c_fc->forward(x));
    tap("act", h);
    return dropout->forward(c_proj->forward(h));
  });
}

GPT2Block::GPT2Block(const GPT2BlockConfig& config, nn::Init init)
    : nn::Module("GPT2Block"), generator_(init.generator) {
  config.validate();
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(
                                     config.n_embd, config.layer_norm_epsilon, config.bias, init));
  attn = register_module("attn", std::make_shared<GPT2Attention>(config, init));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(
                                     config.n_embd, config.layer_norm_epsilon, config.bias, init));
  if (config.moe) {
    // The experts' second projections add into the residual stream like mlp.c_proj.
    moe = register_module("moe", std::make_shared<nn::MoE>(*config.moe, init, init.generator));
    moe_dropout = register_module(
        "moe_dropout", std::make_shared<nn::Dropout>(config.resid_pdrop, init.generator));
  } else {
    mlp = register_module("mlp", std::make_shared<GPT2MLP>(config, init));
  }
}

void GPT2Block::set_recompute(nn::Recompute mode) {
  TESSEL_CHECK(!moe || mode != nn::Recompute::Full,
               "GPT2Block: recompute 'full' is not supported with mixture-of-experts blocks (the "
               "replay would route again and drop the auxiliary loss's gradient); use "
               "'selective' or 'none'");
  recompute_ = mode;
}

Tensor GPT2Block::feed_forward(const Tensor& x) {
  if (!moe) return mlp->forward(x);
  nn::MoE::Output out = moe->forward(x);
  aux_loss_ = out.aux_loss;
  return moe_dropout->forward(out.output);
}

Tensor GPT2Block::forward(const Tensor& x) {
  return run_forward({x}, [&] {
    // Without recording there is nothing to keep, so every mode runs the block once.
    if (recompute_ != nn::Recompute::Full || !autograd::grad_enabled()) return body(x);
    std::vector<Generator*> generators;
    if (generator_ != nullptr) generators.push_back(generator_);
    return autograd::checkpoint([this](const std::vector<Tensor>& in) { return body(in[0]); }, {x},
                                generators);
  });
}

Tensor GPT2Block::body(const Tensor& x) {
  const bool selective = recompute_ == nn::Recompute::Selective && autograd::grad_enabled();
  Tensor a = selective ? attn->forward_recomputed(x, *ln_1) : attn->forward(ln_1->forward(x));
  Tensor h = ops::add(x, a);
  tap("resid_attn", h);
  return ops::add(h, feed_forward(ln_2->forward(h)));
}

}  // namespace tessel::models
