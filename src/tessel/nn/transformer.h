// SPDX-License-Identifier: Apache-2.0
// The pre-LN transformer block of GPT-2 (Radford et al. 2019): x + attn(ln_1(x)), then
// x + mlp(ln_2(x)); causal self-attention with one fused QKV projection, and an MLP
// fc -> tanh GELU -> proj. Submodule names follow GPT-2's (ln_1, attn.c_attn, attn.c_proj, ln_2,
// mlp.c_fc, mlp.c_proj), so checkpoints map one to one. Intermediates reported to observers, under
// the block's path: ln_1, attn.c_attn (fused qkv), attn.q / attn.k / attn.v ([B, T, H, D]),
// attn.y (heads merged, before c_proj), attn.c_proj, attn, resid_attn, ln_2, mlp.c_fc, mlp.act,
// mlp.c_proj, mlp, and the block output itself. A block can trade compute for memory by
// recomputing part or all of itself in backward (see Recompute).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "tessel/nn/layers.h"

namespace tessel::nn {

// What a block recomputes in backward instead of keeping from forward (activation recomputation,
// through autograd::checkpoint, with dropout masks replayed bit for bit).
//  None: every tensor the block's ops save stays alive until backward.
//  Selective: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
//    Models") recompute the attention core, whose saved tensors are large and cheap to rebuild.
//    tessel's fused attention already keeps no T x T matrix (only its output and the per-row
//    log-sum-exp), so recomputing the core alone would free only the log-sum-exp. Selective here
//    therefore recomputes everything from the block input to the c_proj input: ln_1, the fused
//    QKV projection and the attention core; ln_1's output, the [B, T, 3C] qkv tensor and the
//    log-sum-exp are not kept (4 of the 15 [B, T, C]-sized tensors a GPT-2 block saves) for a
//    quarter of the block's matmul FLOPs plus the attention forward.
//  Full: Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost"): only the block input
//    is kept and the whole block runs again in backward.
// During a recomputation the submodules' hooks and activation observers run a second time, and
// under selective attn's forward hooks see the block input (ln_1 runs inside the region).
enum class Recompute { None, Selective, Full };

std::string_view recompute_name(Recompute mode);
// "none" | "selective" | "full"; anything else is an Error naming the three.
Recompute parse_recompute(std::string_view name);

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
  // forward(norm(x)), with norm, c_attn and the attention core recomputed in backward: only x and
  // the core's output (the c_proj input) are kept. Block's selective recomputation.
  Tensor forward_recomputed(const Tensor& x, LayerNorm& norm);
  // The attention core: fused qkv [B, T, 3C] -> causal attention, heads merged [B, T, C].
  Tensor core(const Tensor& qkv);
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
  // Takes effect at the next forward; gradients are bitwise those of Recompute::None.
  void set_recompute(Recompute mode) { recompute_ = mode; }
  Recompute recompute() const { return recompute_; }
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;

 private:
  Tensor body(const Tensor& x);
  Recompute recompute_ = Recompute::None;
  Generator* generator_;  // the dropouts' (null: the process-wide one), restored for the replay
};

}  // namespace tessel::nn
