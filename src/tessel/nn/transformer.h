// SPDX-License-Identifier: Apache-2.0
// The pre-LN transformer block of GPT-2 (Radford et al. 2019): x + attn(ln_1(x)), then
// x + mlp(ln_2(x)); causal self-attention with one fused QKV projection, and an MLP
// fc -> tanh GELU -> proj. Submodule names follow GPT-2's (ln_1, attn.c_attn, attn.c_proj, ln_2,
// mlp.c_fc, mlp.c_proj), so checkpoints map one to one. Intermediates reported to observers, under
// the block's path: ln_1, attn.c_attn (fused qkv), attn.q / attn.k / attn.v ([B, T, H, D]),
// attn.y (heads merged, before c_proj), attn.c_proj, attn, resid_attn, ln_2, mlp.c_fc, mlp.act,
// mlp.c_proj, mlp, and the block output itself.
#pragma once

#include <cstdint>
#include <memory>

#include "tessel/nn/layers.h"

namespace tessel::nn {

struct BlockConfig {
  int64_t n_embd = 768;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0: 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  double resid_pdrop = 0.0;  // dropout after each residual branch (training only)
  // Residual projections (attn.c_proj, mlp.c_proj) start with std / sqrt(2 * n_layer) (GPT-2).
  int64_t n_layer = 1;
  bool bias = true;

  int64_t inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  void validate() const;
};

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const BlockConfig& config, Init init = {});
  // x [B, T, C] -> [B, T, C]
  Tensor forward(const Tensor& x);
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> resid_dropout;

 private:
  int64_t n_embd_, n_head_;
};

class MLP : public Module {
 public:
  MLP(const BlockConfig& config, Init init = {});
  Tensor forward(const Tensor& x);
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;
};

class Block : public Module {
 public:
  Block(const BlockConfig& config, Init init = {});
  Tensor forward(const Tensor& x);
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

}  // namespace tessel::nn
