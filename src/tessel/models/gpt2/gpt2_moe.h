// SPDX-License-Identifier: Apache-2.0
// GPT-2-MoE's expert settings (DeepSpeed-MoE, Rajbhandari et al. 2022): GPT-2 whose MLP is a
// mixture of GELU experts in every moe_every-th block (blocks moe_every - 1, 2 moe_every - 1, ...:
// every other block by default), top-k routing with capacity and token dropping (GShard / Switch),
// the load-balancing and router z-loss coefficients, and PR-MoE: a per-block expert count (a
// pyramid, 0 for a dense block) and the residual form (a dense MLP plus one expert). Read from and
// written to the config.json keys docs/MOE.md lists (model_type "gpt2_moe"); an Error names the
// key and the bad value.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tessel/nn/moe_config.h"

namespace tessel::models {

struct GPT2MoESettings {
  int64_t num_experts = 0;  // 0: dense GPT-2
  int64_t top_k = 1;
  int64_t moe_every = 2;
  // PR-MoE's pyramid: one expert count per block (0: dense); replaces num_experts and moe_every.
  std::vector<int64_t> expert_counts;
  double capacity_factor = 1.0;
  bool drop_tokens = true;
  nn::GateForm gate_form = nn::GateForm::Switch;
  double router_jitter = 0.0;
  double aux_loss_coef = 0.01;
  double z_loss_coef = 0.0;
  bool residual = false;  // PR-MoE's residual form (top_k 1)

  bool enabled() const { return num_experts > 0 || !expert_counts.empty(); }
  // Experts of block `layer` (0: a dense block).
  int64_t experts_in(int64_t layer) const;
  // The MoE layer of block `layer` (experts_in(layer) > 0) for width n_embd and inner width.
  nn::MoEConfig layer_config(int64_t layer, int64_t n_embd, int64_t inner) const;
  // Range checks against the model's depth; one Error naming the key and the values.
  void validate(int64_t n_layer) const;

  // The keys of a gpt2_moe config.json (`what` names the source in errors), and back.
  static GPT2MoESettings from_json(const nlohmann::json& j, const std::string& what);
  void to_json(nlohmann::json& j) const;
};

}  // namespace tessel::models
