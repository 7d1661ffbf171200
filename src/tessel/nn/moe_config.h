// SPDX-License-Identifier: Apache-2.0
// Configuration of a mixture-of-experts layer: the router (top-k gating in Mixtral's or
// Switch/GShard's form, router jitter), capacity and token dropping (GShard, Switch Transformer),
// the auxiliary losses (Switch's load balancing, ST-MoE's router z-loss), the experts' MLP, and
// DeepSpeed-MoE's PR-MoE (the residual form and per-layer expert counts, a pyramid). docs/MOE.md
// describes every field under its config key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::nn {

// How the chosen experts' gates are formed from the router's softmax p over all experts.
enum class GateForm {
  Mixtral,  // the top-k probabilities renormalised to sum to 1 over the chosen k
  Switch,   // the top-k probabilities as they are (Switch Transformer, GShard without renorm)
};
// The MLP of each expert (and of PR-MoE's dense branch).
enum class ExpertKind {
  SwiGLU,  // down(silu(gate(x)) * up(x)), no biases (LLaMA, Mixtral)
  Gelu,    // proj(gelu(fc(x) + b_fc)) + b_proj, tanh GELU (GPT-2)
};

std::string_view gate_form_name(GateForm form);
std::string_view expert_kind_name(ExpertKind kind);
GateForm parse_gate_form(std::string_view name);      // "mixtral" | "switch"
ExpertKind parse_expert_kind(std::string_view name);  // "swiglu" | "gelu"

struct MoEConfig {
  int64_t hidden = 0;       // model width C
  int64_t ffn_hidden = 0;   // each expert's inner width F
  int64_t num_experts = 0;  // E
  int64_t top_k = 2;        // experts per token, 1 <= k <= E
  GateForm gate_form = GateForm::Mixtral;
  ExpertKind expert = ExpertKind::SwiGLU;
  // Capacity per expert = ceil(capacity_factor * tokens * top_k / num_experts) when drop_tokens;
  // without it every assignment is kept and no expert is padded.
  bool drop_tokens = true;
  // Whether the capacity also applies in eval mode. Off, inference computes every pair, so a
  // token's output does not depend on the other tokens of its batch (decoding one token at a time
  // equals the whole sequence's forward), as DeepSpeed-MoE evaluates without dropping.
  bool drop_in_eval = true;
  double capacity_factor = 1.25;
  // Router jitter (Switch): in training, the router's input is multiplied elementwise by noise
  // uniform in [1 - jitter, 1 + jitter) from the layer's counter-based generator; 0 disables it.
  double jitter = 0.0;
  double aux_loss_coef = 0.01;  // load-balancing loss E * sum_i f_i P_i
  double z_loss_coef = 0.0;     // router z-loss mean_t logsumexp(logits_t)^2
  // PR-MoE residual form: output = dense MLP(x) + gate * chosen expert(x) (top_k must be 1).
  bool residual = false;

  // Throws one tessel::Error naming the offending values.
  void validate() const;
  // Capacity for `tokens` routed tokens (only meaningful with drop_tokens).
  int64_t capacity(int64_t tokens) const;
};

// Per-layer expert counts: PR-MoE's pyramid (fewer experts in early layers, more in the last
// ones). Entry i is layer i's expert count; 0 makes that layer dense (no MoE).
struct MoEPyramid {
  std::vector<int64_t> experts_per_layer;

  // Checks every entry against `base` (top_k <= count for each MoE layer); one Error naming the
  // layer and the values.
  void validate(const MoEConfig& base) const;
  bool is_moe(int64_t layer) const;
  // base with layer's expert count.
  MoEConfig for_layer(const MoEConfig& base, int64_t layer) const;
};

}  // namespace tessel::nn
