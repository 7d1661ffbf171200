// SPDX-License-Identifier: Apache-2.0
// The pre-LN transformer block of GPT-2 (Radford et al. 2019): x + attn(ln_1(x)), then
// x + mlp(ln_2(x)); causal self-attention with one fused QKV projection, and an MLP
// fc -> tanh GELU -> proj. Submodule names follow GPT-2's (ln_1, attn.c_attn, attn.c_proj, ln_2,
// mlp.c_fc, mlp.c_proj), so checkpoints map one to one. Intermediates reported to observers, under
// the block's path: ln_1, attn.c_attn (fused qkv), attn.q / attn.k / attn.v ([B, T, H, D]),
// attn.y (heads merged, before c_proj), attn.c_proj, attn, resid_attn, ln_2, mlp.c_fc, mlp.act,
// mlp.c_proj, mlp, and the block output itself. A block can trade compute for memory by
// recomputing part or all of itself in backward (see nn::Recompute). A GPT-2-MoE block has `moe`
// (an nn::MoE of GELU experts, then the residual dropout) in place of `mlp` and keeps the last
// forward's weighted auxiliary loss for the model to collect.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "tessel/nn/layers.h"
#include "tessel/nn/moe.h"
#include "tessel/nn/recompute.h"

namespace tessel::models {

struct GPT2BlockConfig {
  int64_t n_embd = 768;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0: 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  double resid_pdrop = 0.0;  // dropout after each residual branch (training only)
  // Residual projections (attn.c_proj, mlp.c_proj) start with std / sqrt(2 * n_layer) (GPT-2).
  int64_t n_layer = 1;
  bool bias = true;
  std::optional<nn::MoEConfig> moe;  // a GPT-2-MoE block's experts (replacing the MLP)

  int64_t inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  void validate() const;
};

class GPT2Attention : public nn::Module {
 public:
  GPT2Attention(const GPT2BlockConfig& config, nn::Init init = {});
  // x [B, T, C] -> [B, T, C]
  Tensor forward(const Tensor& x);
  // forward(norm(x)), with norm, c_attn and the attention core recomputed in backward: only x and
  // the core's output (the c_proj input) are kept. GPT2Block's selective recomputation.
  Tensor forward_recomputed(const Tensor& x, nn::LayerNorm& norm);
  // The attention core: fused qkv [B, T, 3C] -> causal attention, heads merged [B, T, C].
  Tensor core(const Tensor& qkv);
  std::shared_ptr<nn::Linear> c_attn, c_proj;
  std::shared_ptr<nn::Dropout> resid_dropout;

 private:
  int64_t n_embd_, n_head_;
};

class GPT2MLP : public nn::Module {
 public:
  GPT2MLP(const GPT2BlockConfig& config, nn::Init init = {});
  Tensor forward(const Tensor& x);
  std::shared_ptr<nn::Linear> c_fc, c_proj;
  std::shared_ptr<nn::Dropout> dropout;
};

class GPT2Block : public nn::Module {
 public:
  GPT2Block(const GPT2BlockConfig& config, nn::Init init = {});
  Tensor forward(const Tensor& x);
  // Takes effect at the next forward; gradients are bitwise those of nn::Recompute::None. An MoE
  // block refuses Full (the replayed forward would route again and lose the auxiliary loss).
  void set_recompute(nn::Recompute mode);
  nn::Recompute recompute() const { return recompute_; }
  // The MLP (or the experts and their dropout) on ln_2's output.
  Tensor feed_forward(const Tensor& x);
  const Tensor& last_aux_loss() const { return aux_loss_; }  // undefined for a dense block
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<GPT2Attention> attn;
  std::shared_ptr<GPT2MLP> mlp;  // dense blocks
  std::shared_ptr<nn::MoE> moe;  // GPT-2-MoE blocks
  std::shared_ptr<nn::Dropout> moe_dropout;

 private:
  Tensor body(const Tensor& x);
  nn::Recompute recompute_ = nn::Recompute::None;
  Tensor aux_loss_;
  Generator* generator_;  // the dropouts' (null: the process-wide one), restored for the replay
};

}  // namespace tessel::models
