// SPDX-License-Identifier: Apache-2.0
// The sharding ILP (plan/shard_plan.h) run for one tensor-parallel degree and written as the plan
// JSON `tessel train --tp-plan FILE` applies: what `tessel plan shard` prints and what
// `tessel plan search --shard-plans DIR` searches beside the family's built-in plan.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tessel/models/causal_lm.h"
#include "tessel/plan/cluster.h"
#include "tessel/plan/shard_plan.h"

namespace tessel::cli {

struct ShardRequest {
  int tp = 2;
  int64_t batch = 8;  // sequences per micro-batch the step is traced with
  int64_t seq = 0;    // 0: the model's context
  double memory = 0;  // budget per rank in bytes; 0: the cluster's device memory
  std::string dtype = "f32";
  // Solved for sequence parallelism: the plan then holds the Sequence rules `--sp` runs with.
  bool sequence_parallel = false;
};

// Traces `config`'s step, solves the ILP on `cluster` and returns the plan's JSON; its summary
// (graph and program sizes, solve time, predicted step and memory, the rules) goes to `summary`
// when given, one line per rule after a header.
std::string solve_shard_plan(const models::ModelConfig& config, const plan::Cluster& cluster,
                             const ShardRequest& request, std::FILE* summary);
// The same in two steps: the ILP's rules, then their JSON, whose about line names the request's
// batch or, when given, the micro-batches ("2, 3, 6") the rules were solved for.
std::vector<plan::ShardPlanRule> solve_shard_rules(const models::ModelConfig& config,
                                                   const plan::Cluster& cluster,
                                                   const ShardRequest& request, std::FILE* summary);
std::string shard_plan_text(const models::ModelConfig& config, const plan::Cluster& cluster,
                            const ShardRequest& request,
                            const std::vector<plan::ShardPlanRule>& rules,
                            const std::string& micro_batches = "");

}  // namespace tessel::cli
