// SPDX-License-Identifier: Apache-2.0
// The serving cost model's terms for a mixture of experts (DeepSpeed-MoE inference, Rajbhandari
// et al. 2022, section 5; docs/PLANNER.md, "Serving a mixture of experts"): a token multiplies
// with the dense matrices and with the k experts its router chose in each MoE layer (the active
// parameters), a step reads the weights of the experts any of its tokens chose (k / E of them at
// one token, all of them once the batch is large), the experts are spread over ep ranks and each
// expert's FFN columns over tp (what `tessel generate|serve --ep E --tp T` runs), and each MoE
// layer exchanges its T·k expert rows: one all-reduce over tp (of T·k rows where a dense MLP sums
// T) and one variable-size all-gather over ep of the rank's block (docs/MOE.md, "Expert-parallel
// inference": every rank routes the same tokens, so nothing travels to the experts; the
// all-to-all of training's dispatch would move every token out and back).
#pragma once

#include <cstdint>
#include <string>

#include "tessel/models/causal_lm.h"
#include "tessel/plan/cluster.h"

namespace tessel::plan {

struct ServeShape;

// What the serving model needs of a model's MoE layers; all zero for a dense model.
struct ServeExperts {
  int64_t moe_layers = 0;
  int64_t top_k = 0;
  int64_t min_experts = 0;    // the fewest experts of a layer (ep must divide every layer's count)
  int64_t expert_width = 0;   // each expert's FFN width F (the narrowest layer's)
  int64_t expert_params = 0;  // every expert tensor of every MoE layer (weights and biases)
  // Expert matrix parameters one token multiplies with over all MoE layers (k experts a layer).
  double active_params = 0;
  // Parameters of one expert of each layer summed over the layers, in which tp splits the FFN
  // columns: the rest (GELU's output bias) stays whole on every tp rank.
  int64_t column_params = 0, whole_params = 0;
  bool any() const { return moe_layers > 0; }
};

// The MoE layers of `model` (built shape-only on meta; nothing is read).
ServeExperts serve_experts(models::CausalLM& model);

// serve_shape's (serve_cost.h) matrices of a mixture of experts `model` (shape-only), into `s`
// whose layers are set: a block's dense matrices the mean over the blocks (routers included,
// experts not), the widest of them and of the experts as d_ff, and the MoE layers above.
void count_moe_matrices(models::CausalLM& model, ServeShape& s);

// Why tessel cannot split the experts over `ep` ranks ("" when it can).
std::string expert_split_refusal(const ServeExperts& e, int ep);

// The expert parameters one rank of ep x tp holds (tp rank 0: the balanced rule gives it the most
// columns), and the share of all expert parameters a step of `tokens` tokens reads on that rank:
// the experts some token chose (each token picks k of E uniformly: 1 - (1 - k/E)^tokens of them).
double expert_params_per_rank(const ServeExperts& e, int ep, int tp);
double expert_read_fraction(const ServeExperts& e, double tokens);

// Bytes an MoE layer's forward statement holds at once on a rank of ep x tp for `rows` tokens
// (`elem` bytes an element): the residual and attention outputs still named, the router's logits
// and probabilities, the expert-ordered input rows, the rank's rows' expert activations and
// outputs (of its F / tp columns) and, under ep, every rank's rows gathered.
double moe_workspace_bytes(const ServeShape& shape, int ep, int tp, double rows, int elem);

// The MoE layers' collectives of one stage's step of `rows` tokens on its `layers` blocks (of the
// model's `total_layers`), beyond the dense block's: under tp the sum of the T·k expert rows
// instead of the MLP's T rows; under ep the all-gather of the T·k rows of d_model elements.
double moe_comm_seconds(const Cluster& c, const ServeExperts& e, int64_t d_model, int ep, int tp,
                        double rows, int64_t layers, int64_t total_layers, int act_bytes);

}  // namespace tessel::plan
