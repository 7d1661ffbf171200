// SPDX-License-Identifier: Apache-2.0
// Recomputation finer than one mode for a layout, as the plan search (plan/search.h) finds it
// from the layout's predictions with each mode on every rank: a mode per pipeline rank, each
// rank's least that fits (train.recompute = "full,none"); a mode on only the fewest of a rank's
// first blocks that fit, by bisection over the count (Megatron-LM's --recompute-num-layers:
// "selective:2"), the other blocks recomputing nothing or, where the rank needs full, selective
// ("full:2+selective"). Internal to plan/.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "tessel/models/causal_lm.h"
#include "tessel/nn/recompute.h"
#include "tessel/plan/search.h"

namespace tessel::plan {

// The ranks' peaks of a layout predicted with each mode on every rank, by mode (the enum orders
// the modes by the work they repeat).
using PeaksByMode = std::map<nn::Recompute, std::vector<double>>;

// Each pipeline rank's least recomputation under which it fits `memory`; empty when some rank
// fits under none.
std::vector<nn::Recompute> least_fitting_modes(const PeaksByMode& peaks, int pp, double memory);
// least_fitting_modes, and empty too when every rank takes the same mode (that layout is
// predicted already).
std::vector<nn::Recompute> least_recompute_per_rank(const PeaksByMode& peaks, int pp,
                                                    double memory);

// The blocks pipeline rank `r` of `l` runs (pp 1: the model's), cut as memory_layout cuts them.
int64_t rank_block_count(const models::ModelConfig& config, const SearchRequest& request,
                         const Layout& l, int r);

// `l` with `modes` per rank (one under pp 1), each on the first `counts[r]` of the rank's
// `blocks[r]` blocks and `rests[r]` on its others.
Layout with_block_recompute(Layout l, const std::vector<nn::Recompute>& modes,
                            const std::vector<int64_t>& counts, const std::vector<int64_t>& blocks,
                            const std::vector<nn::Recompute>& rests);

// SearchRequest::block_recompute for `l`: each rank's least mode that fits, on the fewest of its
// first blocks that fit, the others taking `rest` where the mode is stronger than it (none
// otherwise). Bisection, every rank at once, between a count that does not fit (0: the rank with
// `rest` or none on every block, weaker than its least mode that fits) and one that does, each
// probe one `predict` of the layout. nullopt when some rank fits under no mode, when no rank can
// leave a block out, or when no rank gives blocks to a `rest` other than none.
std::optional<PlanResult> fewest_recomputed_blocks(
    const models::ModelConfig& config, const SearchRequest& request, const Layout& l,
    const PeaksByMode& peaks, double memory,
    const std::function<PlanResult(const Layout&)>& predict, nn::Recompute rest);

}  // namespace tessel::plan
