// SPDX-License-Identifier: Apache-2.0
#include "tessel/nn/moe_config.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/error.h"

namespace tessel::nn {

std::string_view gate_form_name(GateForm form) {
  return form == GateForm::Mixtral ? "mixtral" : "switch";
}

std::string_view expert_kind_name(ExpertKind kind) {
  return kind == ExpertKind::SwiGLU ? "swiglu" : "gelu";
}

GateForm parse_gate_form(std::string_view name) {
  if (name == "mixtral") return GateForm::Mixtral;
  if (name == "switch") return GateForm::Switch;
  TESSEL_FAIL("moe: gate_form '", name, "' is not one of 'mixtral', 'switch'");
}

ExpertKind parse_expert_kind(std::string_view name) {
  if (name == "swiglu") return ExpertKind::SwiGLU;
  if (name == "gelu") return ExpertKind::Gelu;
  TESSEL_FAIL("moe: expert '", name, "' is not one of 'swiglu', 'gelu'");
}

void MoEConfig::validate() const {
  TESSEL_CHECK(hidden > 0 && ffn_hidden > 0, "moe: hidden (", hidden, ") and ffn_hidden (",
               ffn_hidden, ") must be > 0");
  TESSEL_CHECK(num_experts > 0, "moe: num_experts must be >= 1, got ", num_experts);
  TESSEL_CHECK(top_k >= 1, "moe: top_k must be >= 1, got ", top_k);
  TESSEL_CHECK(top_k <= num_experts, "moe: top_k ", top_k, " exceeds num_experts ", num_experts);
  if (drop_tokens)
    TESSEL_CHECK(std::isfinite(capacity_factor) && capacity_factor > 0,
                 "moe: capacity_factor must be > 0 when drop_tokens is on, got ", capacity_factor,
                 " (turn drop_tokens off for no capacity limit)");
  TESSEL_CHECK(std::isfinite(jitter) && jitter >= 0 && jitter < 1,
               "moe: jitter must lie in [0, 1), got ", jitter);
  TESSEL_CHECK(std::isfinite(aux_loss_coef) && aux_loss_coef >= 0,
               "moe: aux_loss_coef must be finite and >= 0, got ", aux_loss_coef);
  TESSEL_CHECK(std::isfinite(z_loss_coef) && z_loss_coef >= 0,
               "moe: z_loss_coef must be finite and >= 0, got ", z_loss_coef);
  TESSEL_CHECK(!residual || top_k == 1,
               "moe: the residual (PR-MoE) form adds one chosen expert to ",
               "the dense MLP, so top_k must be 1, got ", top_k);
}

int64_t MoEConfig::capacity(int64_t tokens) const {
  const double c =
      std::ceil(capacity_factor * double(tokens) * double(top_k) / double(num_experts));
  return std::max<int64_t>(1, int64_t(c));
}

void MoEPyramid::validate(const MoEConfig& base) const {
  TESSEL_CHECK(!experts_per_layer.empty(), "moe: the pyramid's experts_per_layer is empty");
  for (size_t i = 0; i < experts_per_layer.size(); ++i) {
    const int64_t e = experts_per_layer[i];
    TESSEL_CHECK(e >= 0, "moe: experts_per_layer[", i, "] is ", e, ", expected >= 0 (0: dense)");
    TESSEL_CHECK(e == 0 || base.top_k <= e, "moe: experts_per_layer[", i, "] is ", e,
                 ", fewer than top_k ", base.top_k);
  }
}

bool MoEPyramid::is_moe(int64_t layer) const {
  TESSEL_CHECK(layer >= 0 && layer < int64_t(experts_per_layer.size()), "moe: layer ", layer,
               " is outside the pyramid's ", experts_per_layer.size(), " layers");
  return experts_per_layer[size_t(layer)] > 0;
}

MoEConfig MoEPyramid::for_layer(const MoEConfig& base, int64_t layer) const {
  TESSEL_CHECK(is_moe(layer), "moe: layer ", layer, " of the pyramid is dense (0 experts)");
  MoEConfig c = base;
  c.num_experts = experts_per_layer[size_t(layer)];
  c.validate();
  return c;
}

}  // namespace tessel::nn
