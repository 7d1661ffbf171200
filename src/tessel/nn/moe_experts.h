// SPDX-License-Identifier: Apache-2.0
// The experts of a mixture-of-experts layer as stacked weights ([experts, out, in] per projection),
// applied to tokens already grouped by expert: each projection is one grouped GEMM over the
// experts' contiguous rows (ops::grouped_linear). SwiGLU experts as Mixtral's (w1 = gate_proj,
// w3 = up_proj, w2 = down_proj, no biases) or GELU experts as GPT-2's MLP (c_fc, c_proj with
// biases; the per-row bias is gathered by expert). For inference a stacked weight can be kept as
// GGUF blocks (llama.cpp's blk.N.ffn_*_exps, nn/quantized.h), multiplied in place by
// ops::quant_grouped_linear: no dequantized copy of a stack exists. DenseMLP is the same MLP as one
// ordinary module: PR-MoE's residual branch. Expert tensor parallelism (Megatron-LM's split of an
// MLP, applied to every expert at once): keep_ffn leaves each expert's FFN columns
// [first, first + n) (gate/up/fc column-parallel, down/proj row-parallel), and an
// ExpertTensorRegion joins the pieces: f on the rows entering the experts, g (the sum over tp) on
// their outputs before the output bias, one pair per layer call whatever the expert count.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>

#include "tessel/kernels/quant/quant_format.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/moe_config.h"

namespace tessel::nn {

// Megatron-LM's f and g for the experts' FFN split over tensor-parallel ranks (installed by
// parallel/expert; nn has no communicator). Every rank of the group calls them in the same order.
class ExpertTensorRegion {
 public:
  virtual ~ExpertTensorRegion() = default;
  // f: identity forward; backward sums the input gradient over the ranks.
  virtual Tensor enter(const Tensor& x) = 0;
  // g: the ranks' partial outputs summed forward; identity backward.
  virtual Tensor reduce(const Tensor& partial) = 0;
};

class ExpertMLPs : public Module {
 public:
  ExpertMLPs(int64_t experts, int64_t hidden, int64_t ffn_hidden, ExpertKind kind, Init init = {});
  // x [rows, hidden] grouped by offsets (i64 [experts + 1]); expert_of_row (i64 [rows]) names each
  // row's expert (read by the GELU experts' biases). -> [rows, hidden].
  Tensor forward(const Tensor& x, const Tensor& offsets, const Tensor& expert_of_row);
  ExpertKind kind() const { return kind_; }
  int64_t experts() const { return experts_; }     // the experts this module holds
  int64_t first_expert() const { return first_; }  // the layer's index of the first of them

  // Keeps experts [first, first + count) only (expert parallelism): every stacked tensor becomes
  // those rows, in its own memory, keeping its name and identity; forward's offsets then cover
  // them alone.
  // A stack held as GGUF blocks stays a view of them (no copy).
  void keep_experts(int64_t first, int64_t count);
  // Keeps FFN columns [first, first + count) of every expert (expert tensor parallelism): the
  // gate/up/fc weights' rows and fc_bias's columns (dim 1), the down/proj weights' columns
  // (dim 2); proj_bias stays whole and is added once, after `region`'s sum. Same rebinding as
  // keep_experts. Either order with keep_experts.
  void keep_ffn(int64_t first, int64_t count, std::shared_ptr<ExpertTensorRegion> region);
  int64_t ffn_hidden() const { return ffn_hidden_; }  // the FFN columns this module holds
  int64_t first_ffn_column() const { return ffn_first_; }
  ExpertTensorRegion* tensor_region() const { return region_.get(); }

  // Inference with the stacked weight `name` (gate_proj, up_proj, down_proj, fc_weight,
  // proj_weight) kept as `blocks`, i8 [experts(), out, row_bytes(type, in)] (the rows of this
  // module's experts only). Forward in training mode is an Error; dequantize() widens every such
  // stack back to f32.
  void set_quantized(const std::string& name, kernels::quant::QuantType type, const Tensor& blocks);
  void dequantize();
  std::optional<kernels::quant::QuantType> quant_type(const std::string& name) const;
  bool quantized() const;

  // SwiGLU: gate_proj, up_proj [E, F, C], down_proj [E, C, F].
  // GELU: fc_weight [E, F, C], fc_bias [E, F], proj_weight [E, C, F], proj_bias [E, C].
  Tensor gate_proj, up_proj, down_proj;
  Tensor fc_weight, fc_bias, proj_weight, proj_bias;

 private:
  // The stacked weights, their [out, in] and GGUF type when held as blocks.
  struct Stack {
    const char* name;
    Tensor* weight;
    int64_t out, in;
  };
  std::array<Stack, 5> stacks();
  size_t stack_index(const std::string& name);  // an Error for a name this kind lacks
  Tensor project(const Tensor& x, const std::string& name, const Tensor& offsets);

  int64_t experts_, hidden_, ffn_hidden_;
  int64_t first_ = 0;
  int64_t ffn_first_ = 0;
  ExpertKind kind_;
  std::array<std::optional<kernels::quant::QuantType>, 5> quant_;  // by stacks()' order
  std::shared_ptr<ExpertTensorRegion> region_;
};

class DenseMLP : public Module {
 public:
  DenseMLP(int64_t hidden, int64_t ffn_hidden, ExpertKind kind, Init init = {});
  Tensor forward(const Tensor& x);

  // SwiGLU: gate_proj, up_proj, down_proj (no bias). GELU: c_fc, c_proj (with bias).
  std::shared_ptr<Linear> gate_proj, up_proj, down_proj, c_fc, c_proj;

 private:
  ExpertKind kind_;
};

}  // namespace tessel::nn
