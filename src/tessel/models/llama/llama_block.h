// SPDX-License-Identifier: Apache-2.0
// The decoder layer of the LLaMA family: x + self_attn(input_layernorm(x)), then
// x + mlp(post_attention_layernorm(x)), with RMSNorm, rotary position embeddings on q and k,
// grouped-query attention (num_key_value_heads KV heads, each serving a group of query heads;
// one: multi-query), an optional Mistral sliding window, and the SwiGLU MLP
// down_proj(silu(gate_proj(x)) * up_proj(x)). Submodule names are Hugging Face's
// (input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj).
// Intermediates reported to observers under the layer's path: self_attn.q / self_attn.k (after
// RoPE, [B, T, H, D]), self_attn.v, self_attn.y (heads merged, before o_proj), mlp.act
// (silu(gate) * up), resid_attn, and the module outputs. Mixtral's layer has block_sparse_moe (an
// nn::MoE of SwiGLU experts, docs/MOE.md) where the others have mlp; it keeps the last forward's
// auxiliary loss for the model to collect.
//
// Head counts follow the projections' widths: all heads serially, this rank's heads when
// q/k/v_proj are split per head by tensor parallelism (parallel/tensor/plan.h), with no other
// change.
#pragma once

#include <cstdint>
#include <memory>

#include "tessel/models/llama/llama_config.h"
#include "tessel/models/llama/llama_rope.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/moe.h"
#include "tessel/nn/recompute.h"

namespace tessel::models {

class LlamaAttention : public nn::Module {
 public:
  LlamaAttention(const LlamaConfig& config, std::shared_ptr<RotaryTables> rope, nn::Init init);
  // x [B, T, C] (normalised) -> [B, T, C].
  Tensor forward(const Tensor& x);
  // forward(norm(x)) with the norm, q/k/v, RoPE and the attention core recomputed in backward:
  // only x and the o_proj input are kept (the layer's selective recomputation).
  Tensor forward_recomputed(const Tensor& x, nn::RMSNorm& norm);
  // Normalised x -> attention output with heads merged [B, T, heads x head_dim] (o_proj's input).
  Tensor core(const Tensor& x);

  // q [B, T, H', D], k and v [B, T, KV', D] of normalised x at positions [start, start + T),
  // q and k rotated with the tables of a call over start + T positions (incremental decoding).
  struct Projected {
    Tensor q, k, v;
  };
  Projected project(const Tensor& x, int64_t start);
  // The same at explicit positions (i64 [B, T], each < position_end): a ragged serving batch.
  Projected project(const Tensor& x, const Tensor& positions, int64_t position_end);
  int64_t window() const { return window_; }
  // Attention of projected queries over keys / values of positions [0, Tk) (causal, windowed).
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v) const;

  // This module's heads (this rank's under tensor parallelism).
  int64_t local_heads() const { return q_proj->weight.size(0) / head_dim_; }
  int64_t local_kv_heads() const { return k_proj->weight.size(0) / head_dim_; }
  int64_t head_dim() const { return head_dim_; }

  std::shared_ptr<nn::Linear> q_proj, k_proj, v_proj, o_proj;

 private:
  int64_t head_dim_, window_;
  std::shared_ptr<RotaryTables> rope_;
};

class LlamaMLP : public nn::Module {
 public:
  LlamaMLP(const LlamaConfig& config, nn::Init init);
  Tensor forward(const Tensor& x);
  std::shared_ptr<nn::Linear> gate_proj, up_proj, down_proj;
};

class LlamaDecoderLayer : public nn::Module {
 public:
  LlamaDecoderLayer(const LlamaConfig& config, std::shared_ptr<RotaryTables> rope, nn::Init init);
  Tensor forward(const Tensor& x);
  // Takes effect at the next forward; gradients are those of nn::Recompute::None. An MoE layer
  // refuses Full (the replayed forward would re-route and lose the auxiliary loss's graph).
  void set_recompute(nn::Recompute mode);
  nn::Recompute recompute() const { return recompute_; }
  // The feed-forward part on normalised x: mlp, or the experts (their auxiliary loss kept).
  Tensor feed_forward(const Tensor& x);
  // The MoE layer's weighted auxiliary loss of the last forward (undefined for a dense layer).
  const Tensor& last_aux_loss() const { return aux_loss_; }

  std::shared_ptr<nn::RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMLP> mlp;              // dense variants
  std::shared_ptr<nn::MoE> block_sparse_moe;  // Mixtral

 private:
  Tensor body(const Tensor& x);
  nn::Recompute recompute_ = nn::Recompute::None;
  Tensor aux_loss_;
};

}  // namespace tessel::models
