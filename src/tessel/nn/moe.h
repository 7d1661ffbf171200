// SPDX-License-Identifier: Apache-2.0
// A mixture-of-experts layer (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch
// Transformer, Fedus et al. 2021; Mixtral, Jiang et al. 2024), as serial code: a linear router
// with softmax, top-k gating (moe_config.h: Mixtral's renormalised or Switch's raw gates),
// optional router jitter, capacity with GShard's dropping order or no dropping (moe_routing.h),
// experts computed by grouped GEMMs over the tokens each received (moe_experts.h), the outputs
// scattered back weighted by their gates; Switch's load-balancing loss and ST-MoE's router
// z-loss (Zoph et al. 2022) weighted by the config's coefficients; and DeepSpeed-MoE's PR-MoE
// residual form (a dense MLP plus the one chosen expert). docs/MOE.md describes it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/nn/layers.h"
#include "tessel/nn/moe_config.h"
#include "tessel/nn/moe_experts.h"
#include "tessel/nn/moe_routing.h"

namespace tessel::nn {

// What one forward call routed, for the training log (one JSON object per layer and step).
struct MoEStats {
  int64_t tokens = 0;
  int64_t capacity = 0;                    // per expert; 0 without dropping
  std::vector<int64_t> tokens_per_expert;  // (token, choice) pairs each expert computed
  std::vector<int64_t> routed_per_expert;  // pairs routed to each expert before the capacity
  int64_t dropped = 0;                     // pairs dropped by the capacity
  int64_t rows = 0;  // expert rows of this process's tokens (its piece's when it routes a piece)
  double balance_loss = 0;  // E * sum_i f_i P_i, unweighted
  double z_loss = 0;        // mean logsumexp^2, unweighted
  double aux_loss = 0;      // the weighted sum that forward returns

  std::string json() const;  // {"tokens":..,"capacity":..,"tokens_per_expert":[..],...}
};

// Where the experts' rows are computed. Without one the layer runs its own experts; expert
// parallelism (parallel/expert) installs one that sends each row to the rank holding its expert
// and brings the result back.
class ExpertDispatch {
 public:
  virtual ~ExpertDispatch() = default;
  // xs [rows, hidden]: the kept pairs' tokens grouped by expert over all of the layer's experts
  // (routing.offsets); returns the experts' outputs for the same rows in the same order.
  virtual Tensor run(ExpertMLPs& experts, const Tensor& xs, const Routing& routing) = 0;
};

// Where the layer's tokens come from when its caller holds only a piece of them. Without one the
// layer routes what it is given; sequence parallelism (parallel/expert/expert_sequence_parallel.h)
// installs one. Either the layer routes its own piece (MoE::routes_pieces): routing is per token
// but for what the whole call shares (the capacity, GShard's dropping order, the auxiliary losses'
// means), which whole_choices and whole_value supply, so the piece's experts compute only its
// rows; or enter() gathers every rank's piece, so that the layer routes, drops and weighs the
// whole sequence's tokens as one process does, and leave() keeps this rank's piece of the output.
class TokenRegion {
 public:
  virtual ~TokenRegion() = default;
  virtual Tensor enter(const Tensor& x) = 0;
  virtual Tensor leave(const Tensor& y) = 0;

  // Whether the layer may route its piece itself (the region supplies the two below).
  virtual bool routes_pieces() const { return false; }
  // Whether the tokens given are a piece now (false: they are the whole call).
  virtual bool pieces_active() const { return false; }
  // Every token's top-k choices [whole tokens, k] in one process's token order, from this piece's
  // `choices` [x's tokens, k]; `positions` receives the piece's tokens' indices among them. On the
  // meta device, which exchanges no values, each other piece's choices are `meta_choices` of its
  // token count (the layer's meta routing, which every rank of a shape-only run computes alike).
  using MetaChoices = std::function<std::vector<int64_t>(int64_t tokens)>;
  virtual std::vector<int64_t> whole_choices(const Tensor& x, const std::vector<int64_t>& choices,
                                             int64_t k, std::vector<int64_t>& positions,
                                             const MetaChoices& meta_choices = {});
  // `part` (this piece's addend of a sum over the call's tokens) with the whole sum's value and
  // part's gradient: each rank's backward then reaches its own tokens only.
  virtual Tensor whole_value(const Tensor& part);
};

class MoE : public Module {
 public:
  // `jitter_generator` draws the router jitter (null: the process-wide generator).
  explicit MoE(const MoEConfig& config, Init init = {}, Generator* jitter_generator = nullptr);

  struct Output {
    Tensor output;        // x's shape
    Tensor aux_loss;      // scalar: aux_loss_coef * balance_loss + z_loss_coef * z_loss; add it
                          // to the training loss
    Tensor balance_loss;  // scalar, unweighted
    Tensor z_loss;        // scalar, unweighted
  };
  // x [..., hidden] -> output [..., hidden]; every leading position is one token.
  Output forward(const Tensor& x);

  const MoEConfig& config() const { return config_; }
  const MoEStats& last_stats() const { return stats_; }
  const Routing& last_routing() const { return routing_; }
  // Null: the experts run here (the default).
  void set_dispatch(std::shared_ptr<ExpertDispatch> dispatch) { dispatch_ = std::move(dispatch); }
  ExpertDispatch* dispatch() const { return dispatch_.get(); }
  // Null: the tokens given are every token the layer routes (the default).
  void set_token_region(std::shared_ptr<TokenRegion> region) { region_ = std::move(region); }
  TokenRegion* token_region() const { return region_.get(); }
  // Under a region: whether the layer routes its own piece of the tokens (its experts then compute
  // only that piece's rows, and its parameters' gradients are the piece's addends; router jitter
  // takes the piece's elements of the whole call's noise). Not under expert tensor parallelism,
  // whose experts need the same rows on every rank (each computes its columns of them, so it is
  // not repeated work).
  bool routes_pieces() const;

  std::shared_ptr<Linear> router;  // [experts, hidden], no bias
  std::shared_ptr<ExpertMLPs> experts;
  std::shared_ptr<DenseMLP> dense;  // PR-MoE's residual MLP (residual form only)

  // Draw the router jitter positionally (core/positional_draws.h), this process's tokens being
  // part `part` of `parts` of the one-process batch's, as nn::Dropout::set_positional.
  void set_positional(int64_t part, int64_t parts);

 private:
  Tensor jittered(const Tensor& x);
  // Forward on every token of x; `pieces`: x is a piece of the call, routed with its help.
  Output forward_tokens(const Tensor& x, TokenRegion* pieces = nullptr);

  MoEConfig config_;
  Generator* jitter_generator_;
  std::optional<PositionalDraw> positional_;
  std::shared_ptr<ExpertDispatch> dispatch_;
  std::shared_ptr<TokenRegion> region_;
  Routing routing_;
  Routing whole_;  // the whole call's routing when routing_ is a piece's
  MoEStats stats_;
};

}  // namespace tessel::nn
