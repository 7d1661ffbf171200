// SPDX-License-Identifier: Apache-2.0
// The plan search as the CLI runs it for a training configuration: `tessel plan search` and
// `tessel train --plan auto` (which takes the best plan for the launch's world size) and
// `tessel train --cluster FILE` (which writes the layout's predictions beside its measurements).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tessel/plan/search.h"
#include "tessel/train/config.h"

namespace tessel::cli {

// The search request of a training configuration over `devices` ranks: its global batch (or
// micro_batch x grad_accum x devices), sequence length, precision and bucket size, with
// `model`'s tensor-parallel plan and pipeline stages (set_runtime_layouts).
plan::SearchRequest train_search_request(const train::TrainConfig& config, int devices,
                                         const models::ConfigPtr& model);

// Lets `request` predict tp and pp layouts of `model`: tp rank 0 with the family's built-in plan,
// and the pipeline ranks the trainer's partition and schedules make (plan_layout.h), as
// `tessel plan memory --tp --pp` predicts them.
void set_runtime_layouts(plan::SearchRequest& request, const models::ConfigPtr& model);

// The layout `config` runs with these degrees (its ZeRO stage, recomputation, micro-batches).
plan::Layout train_layout_of(const train::TrainConfig& config, int dp, int tp, int pp);

// "--dp 2 --tp 1 --pp 1 --set parallel.zero_stage=1 ...": the layout as `tessel train` flags.
std::string join_args(const std::vector<std::string>& args);

// Bare `tessel plan --model M --cluster F --global-batch B`: the search's options on `plan`
// itself, which print the ranked plans as `plan search` does when no subcommand is given.
void add_plan_search_options(CLI::App& plan);

}  // namespace tessel::cli
