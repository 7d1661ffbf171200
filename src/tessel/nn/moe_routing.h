// SPDX-License-Identifier: Apache-2.0
// The routing decision of a mixture-of-experts layer, made on the host from the router's
// probabilities: each token's top-k experts (GShard, Switch, Mixtral), the capacity limit with
// GShard's dropping order, and the permutation that groups the kept (token, choice) pairs by
// expert so that each expert's rows are contiguous for the grouped GEMM (MegaBlocks' layout, with
// no padding to capacity). Nothing here is differentiable: the gates are gathered from the
// probabilities by the layer with these indices.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessel/nn/moe_config.h"

namespace tessel::nn {

struct Routing {
  int64_t tokens = 0, top_k = 0, experts = 0;
  int64_t capacity = 0;         // per expert; 0 when tokens are never dropped
  std::vector<int64_t> choice;  // [tokens, top_k]: experts by descending probability
  std::vector<uint8_t> kept;    // [tokens, top_k]: 1 when the pair fits its expert's capacity
  std::vector<int64_t> row;     // [tokens, top_k]: the pair's row in expert order (-1: dropped)
  std::vector<int64_t> source;  // [rows]: the token of each row in expert order
  std::vector<int64_t> expert_of_row;  // [rows]
  std::vector<int64_t> offsets;  // [experts + 1]: expert e owns rows offsets[e] .. offsets[e + 1]
  std::vector<int64_t> routed;   // [experts]: pairs routed to each expert before the capacity
  std::vector<int64_t> first_choice_count;  // [experts]: tokens whose first choice is the expert
  // route_piece: the tokens are one rank's piece of a call split over ranks (sequence
  // parallelism); capacity, routed and first_choice_count are then the whole call's.
  bool piece = false;

  int64_t rows() const { return int64_t(source.size()); }
  int64_t dropped() const { return tokens * top_k - rows(); }
};

// probs: [tokens, experts] row-major router probabilities. Top-k per token by descending
// probability, the lower expert index first among equal ones. With config.drop_tokens each
// expert keeps at most config.capacity(tokens) pairs, filled in priority order: every token's
// first choice in token order, then every token's second choice in token order, and so on
// (GShard); a pair that finds its expert full is dropped (it contributes nothing to the token's
// output). Within an expert, rows follow the same priority order.
Routing route_tokens(std::span<const double> probs, int64_t tokens, const MoEConfig& config);

// One rank's piece of a call whose tokens are split over ranks (sequence parallelism).
// `whole_choices` [whole_tokens, top_k]: every token's choices (route_tokens' .choice, gathered
// from every piece) in the one-process token order; `positions`: this piece's tokens' indices in
// it. Admission runs over the whole call as route_tokens does, so the piece keeps and drops
// exactly the pairs one process does; the result holds the piece's tokens and their kept rows
// (grouped by expert, in the whole call's order within each), with the whole call's capacity,
// routed and first_choice_count. `whole` (optional) receives the whole call's routing.
Routing route_piece(const std::vector<int64_t>& whole_choices, int64_t whole_tokens,
                    const std::vector<int64_t>& positions, const MoEConfig& config,
                    Routing* whole = nullptr);

}  // namespace tessel::nn
