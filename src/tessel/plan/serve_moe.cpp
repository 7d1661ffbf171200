// SPDX-License-Identifier: Apache-2.0
// The serving cost model's mixture-of-experts terms (plan/serve_moe.h).
#include "tessel/plan/serve_moe.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "tessel/nn/moe.h"
#include "tessel/plan/comm_cost.h"
#include "tessel/plan/serve_cost.h"

namespace tessel::plan {

ServeExperts serve_experts(models::CausalLM& model) {
  ServeExperts e;
  for (auto& [name, module] : model.named_modules()) {
    auto* moe = dynamic_cast<nn::MoE*>(module);
    if (moe == nullptr) continue;
    const nn::MoEConfig& c = moe->config();
    int64_t params = 0, whole = 0, matrices = 0;
    for (const auto& [param, t] : moe->experts->named_parameters()) {
      params += t.numel();
      if (t.ndim() == 3) matrices += t.numel();      // [E, out, in] stacks
      if (param == "proj_bias") whole += t.numel();  // added after the sum over tp
    }
    ++e.moe_layers;
    e.top_k = c.top_k;
    e.min_experts = e.min_experts == 0 ? c.num_experts : std::min(e.min_experts, c.num_experts);
    e.expert_width = e.expert_width == 0 ? c.ffn_hidden : std::min(e.expert_width, c.ffn_hidden);
    e.expert_params += params;
    // A token multiplies with k experts' matrices (the biases are additions).
    e.active_params += double(c.top_k) * double(matrices / c.num_experts);
    e.column_params += (params - whole) / c.num_experts;
    e.whole_params += whole / c.num_experts;
  }
  return e;
}

void count_moe_matrices(models::CausalLM& model, ServeShape& s) {
  s.experts = serve_experts(model);
  // The expert stacks are 3-D; every 2-D matrix of a block is dense (attention, routers, PR-MoE's
  // and the dense blocks' MLPs).
  std::set<const void*> seen;
  int64_t dense = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const int64_t layer = model.layer_of_parameter(name);
    if (p.ndim() != 2 || layer < 1 || layer > s.layers) continue;
    if (!seen.insert(p.storage_ptr().get()).second) continue;
    dense += p.numel();
    for (int64_t d : {p.shape()[0], p.shape()[1]}) s.d_ff = std::max(s.d_ff, d);
  }
  s.block_matrix_params = (dense + s.layers / 2) / s.layers;
  s.d_ff = std::max(s.d_ff, s.experts.expert_width);
}

std::string expert_split_refusal(const ServeExperts& e, int ep) {
  if (ep <= 1) return "";
  if (!e.any()) return "--ep needs a mixture of experts";
  if (e.min_experts % ep != 0)
    return "a layer has " + std::to_string(e.min_experts) + " experts, which --ep " +
           std::to_string(ep) + " ranks cannot split evenly";
  return "";
}

double expert_params_per_rank(const ServeExperts& e, int ep, int tp) {
  if (!e.any()) return 0;
  // Experts of E / ep each layer; tp rank 0 holds ceil(F / tp) of each expert's F columns.
  const double experts = double(e.min_experts) / double(ep);
  const double width = double(e.expert_width);
  const double columns = std::ceil(width / double(tp)) / width;
  // Every layer with the same count E (the families' layout; a pyramid is approximated by the
  // narrowest layer's experts).
  return experts * (double(e.column_params) * columns + double(e.whole_params));
}

double expert_read_fraction(const ServeExperts& e, double tokens) {
  if (!e.any()) return 0;
  const double chosen = double(e.top_k) / double(e.min_experts);
  return 1.0 - std::pow(1.0 - std::min(1.0, chosen), std::max(1.0, tokens));
}

double moe_workspace_bytes(const ServeShape& s, int ep, int tp, double rows, int elem) {
  const ServeExperts& e = s.experts;
  if (!e.any()) return 0;
  const double n = double(tp), C = double(s.d_model), k = double(e.top_k);
  const double hd = double(s.heads * s.head_dim) / n;
  const double qkv = hd + 2 * double((s.kv_heads + tp - 1) / tp) * double(s.head_dim);
  const double F = std::ceil(double(e.expert_width) / n);
  // SwiGLU's stacks are three matrices an expert, GELU's two and biases.
  const bool gated = e.column_params >= 3 * s.d_model * e.expert_width;
  const double mine = rows * k / double(ep);  // the rank's expert rows (the routing spread evenly)
  // Held through the layer: the residual, its normalised copy, the attention's named outputs, the
  // router's logits and probabilities, the pairs' i64 indices (two elements each: the gather's
  // source, the expert of a row, the flat choice, the combine's position) and gates.
  const double held =
      rows * (3 * C + qkv + hd) + 2 * rows * double(e.min_experts) + rows * k * (4 * 2 + 3);
  // The experts' statement: the expert-ordered input, the rank's rows' activations (SwiGLU: gate,
  // up, their product, the silu; GELU: the product, its bias, the sum, the activation) and output,
  // every rank's rows gathered under ep. The combine's: input, output, picked and weighted rows.
  const double experts =
      rows * k * C + mine * (gated ? 4 * F + C : 3 * F + 2 * C) + (ep > 1 ? rows * k * C : 0);
  const double combine = 4 * rows * k * C;
  return (held + std::max(experts, combine)) * elem;
}

double moe_comm_seconds(const Cluster& c, const ServeExperts& e, int64_t d_model, int ep, int tp,
                        double rows, int64_t layers, int64_t total_layers, int act_bytes) {
  if (!e.any() || rows <= 0) return 0;
  // The stage's share of the MoE layers (they are spread evenly over the blocks).
  const double moe_layers = double(e.moe_layers) * double(layers) / double(total_layers);
  const double row_bytes = double(d_model) * act_bytes;
  const double k = double(e.top_k);
  auto cost = [&](Collective op, int n, int stride, double bytes) {
    if (n < 2 || bytes <= 0) return 0.0;
    std::vector<int> ranks;
    for (int i = 0; i < n; ++i) ranks.push_back(i * stride);
    return collective_cost(c, op, ranks, bytes).seconds;
  };
  // tp: the MLP's all-reduce (of T rows, counted with the dense block) sums T·k rows instead.
  const double tp_extra = cost(Collective::AllReduce, tp, 1, rows * k * row_bytes) -
                          cost(Collective::AllReduce, tp, 1, rows * row_bytes);
  // ep: the ranks of one tp index (stride tp) gather the T·k expert rows in expert order.
  const double gather = cost(Collective::AllGather, ep, tp, rows * k * row_bytes);
  return moe_layers * (std::max(0.0, tp_extra) + gather);
}

}  // namespace tessel::plan
