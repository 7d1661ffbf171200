// SPDX-License-Identifier: Apache-2.0
// GPT-2-MoE's expert settings: the config.json keys, their checks, and each block's MoE layer.
#include "tessel/models/gpt2/gpt2_moe.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"

namespace tessel::models {

namespace {

using Json = nlohmann::json;

const Json* key(const Json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t integer(const Json& j, const char* name, int64_t fallback, const std::string& what) {
  const Json* v = key(j, name);
  if (v == nullptr) return fallback;
  TESSEL_CHECK(v->is_number_integer(), what, ": '", name, "' must be an integer, got ", v->dump());
  return v->get<int64_t>();
}

double number(const Json& j, const char* name, double fallback, const std::string& what) {
  const Json* v = key(j, name);
  if (v == nullptr) return fallback;
  TESSEL_CHECK(v->is_number(), what, ": '", name, "' must be a number, got ", v->dump());
  return v->get<double>();
}

bool boolean(const Json& j, const char* name, bool fallback, const std::string& what) {
  const Json* v = key(j, name);
  if (v == nullptr) return fallback;
  TESSEL_CHECK(v->is_boolean(), what, ": '", name, "' must be true or false, got ", v->dump());
  return v->get<bool>();
}

}  // namespace

int64_t GPT2MoESettings::experts_in(int64_t layer) const {
  if (!expert_counts.empty())
    return layer < int64_t(expert_counts.size()) ? expert_counts[size_t(layer)] : 0;
  return num_experts > 0 && (layer + 1) % moe_every == 0 ? num_experts : 0;
}

nn::MoEConfig GPT2MoESettings::layer_config(int64_t layer, int64_t n_embd, int64_t inner) const {
  nn::MoEConfig m;
  m.hidden = n_embd;
  m.ffn_hidden = inner;
  m.num_experts = experts_in(layer);
  m.top_k = top_k;
  m.gate_form = gate_form;
  m.expert = nn::ExpertKind::Gelu;
  m.drop_tokens = drop_tokens;
  m.drop_in_eval = false;  // generation and eval compute every pair
  m.capacity_factor = capacity_factor;
  m.jitter = router_jitter;
  m.aux_loss_coef = aux_loss_coef;
  m.z_loss_coef = z_loss_coef;
  m.residual = residual;
  return m;
}

void GPT2MoESettings::validate(int64_t n_layer) const {
  TESSEL_CHECK(enabled(), "GPT-2-MoE: neither 'num_experts' nor 'expert_counts' is given");
  TESSEL_CHECK(top_k >= 1, "GPT-2-MoE: 'top_k' ", top_k, " must be >= 1");
  if (expert_counts.empty()) {
    TESSEL_CHECK(num_experts >= 1, "GPT-2-MoE: 'num_experts' ", num_experts, " must be >= 1");
    TESSEL_CHECK(top_k <= num_experts, "GPT-2-MoE: 'top_k' ", top_k, " exceeds 'num_experts' ",
                 num_experts, " (each token picks that many distinct experts)");
    TESSEL_CHECK(moe_every >= 1 && moe_every <= n_layer, "GPT-2-MoE: 'moe_every' ", moe_every,
                 " must be in [1, n_layer = ", n_layer, "] (at least one block has experts)");
  } else {
    TESSEL_CHECK(int64_t(expert_counts.size()) == n_layer, "GPT-2-MoE: 'expert_counts' has ",
                 expert_counts.size(), " entries, expected one per block (n_layer = ", n_layer,
                 ")");
    for (size_t i = 0; i < expert_counts.size(); ++i) {
      const int64_t e = expert_counts[i];
      TESSEL_CHECK(e == 0 || (e >= top_k && e >= 1), "GPT-2-MoE: 'expert_counts'[", i, "] = ", e,
                   " must be 0 (a dense block) or at least 'top_k' = ", top_k);
    }
  }
  TESSEL_CHECK(!drop_tokens || (capacity_factor > 0 && std::isfinite(capacity_factor)),
               "GPT-2-MoE: 'capacity_factor' ", capacity_factor,
               " must be > 0 when 'drop_tokens' is true (an expert's capacity is "
               "ceil(capacity_factor x tokens x top_k / experts))");
  TESSEL_CHECK(!residual || top_k == 1, "GPT-2-MoE: 'moe_residual' needs 'top_k' 1, got ", top_k,
               " (PR-MoE adds one expert to the dense MLP)");
  TESSEL_CHECK(router_jitter >= 0 && router_jitter < 1, "GPT-2-MoE: 'router_jitter' ",
               router_jitter, " must be in [0, 1)");
  TESSEL_CHECK(aux_loss_coef >= 0 && z_loss_coef >= 0, "GPT-2-MoE: 'aux_loss_coef' ", aux_loss_coef,
               " and 'z_loss_coef' ", z_loss_coef, " must be >= 0");
}

GPT2MoESettings GPT2MoESettings::from_json(const Json& j, const std::string& what) {
  GPT2MoESettings s;
  s.num_experts = integer(j, "num_experts", 0, what);
  s.top_k = integer(j, "top_k", 1, what);
  s.moe_every = integer(j, "moe_every", 2, what);
  if (const Json* v = key(j, "expert_counts")) {
    TESSEL_CHECK(v->is_array(), what, ": 'expert_counts' must be a list of integers, got ",
                 v->dump());
    for (const Json& e : *v) {
      TESSEL_CHECK(e.is_number_integer(), what, ": 'expert_counts' entries must be integers, got ",
                   v->dump());
      s.expert_counts.push_back(e.get<int64_t>());
    }
  }
  s.capacity_factor = number(j, "capacity_factor", 1.0, what);
  s.drop_tokens = boolean(j, "drop_tokens", true, what);
  if (const Json* v = key(j, "gate_form")) {
    TESSEL_CHECK(v->is_string(), what, ": 'gate_form' must be a string, got ", v->dump());
    try {
      s.gate_form = nn::parse_gate_form(v->get<std::string>());
    } catch (const Error& e) {
      TESSEL_FAIL(what, ": 'gate_form': ", e.what());
    }
  }
  s.router_jitter = number(j, "router_jitter", 0.0, what);
  s.aux_loss_coef = number(j, "aux_loss_coef", 0.01, what);
  s.z_loss_coef = number(j, "z_loss_coef", 0.0, what);
  s.residual = boolean(j, "moe_residual", false, what);
  return s;
}

void GPT2MoESettings::to_json(Json& j) const {
  if (expert_counts.empty()) {
    j["num_experts"] = num_experts;
    j["moe_every"] = moe_every;
  } else {
    j["expert_counts"] = expert_counts;
  }
  j["top_k"] = top_k;
  j["capacity_factor"] = capacity_factor;
  j["drop_tokens"] = drop_tokens;
  j["gate_form"] = std::string(nn::gate_form_name(gate_form));
  j["router_jitter"] = router_jitter;
  j["aux_loss_coef"] = aux_loss_coef;
  j["z_loss_coef"] = z_loss_coef;
  j["moe_residual"] = residual;
}

}  // namespace tessel::models
