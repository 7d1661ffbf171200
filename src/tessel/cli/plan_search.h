// SPDX-License-Identifier: Apache-2.0
// The plan search as the CLI runs it for a training configuration: `tessel plan search` and
// `tessel train --plan auto` (which takes the best plan for the launch's world size) and
// `tessel train --cluster FILE` (which writes the layout's predictions beside its measurements).
#pragma once

#include <string>

#include "tessel/plan/search.h"
#include "tessel/train/config.h"

namespace tessel::cli {

// The search request of a training configuration over `devices` ranks: its global batch (or
// micro_batch x grad_accum x devices), sequence length, precision and bucket size.
plan::SearchRequest train_search_request(const train::TrainConfig& config, int devices);

// The layout `config` runs with these degrees (its ZeRO stage, recomputation, micro-batches).
plan::Layout train_layout_of(const train::TrainConfig& config, int dp, int tp, int pp);

// "--dp 2 --tp 1 --pp 1 --set parallel.zero_stage=1 ...": the layout as `tessel train` flags.
std::string join_args(const std::vector<std::string>& args);

}  // namespace tessel::cli
