// SPDX-License-Identifier: Apache-2.0
// Pipeline stage boundaries by dynamic programming over the layers' costs: Alpa's inter-operator
// pass (Zheng et al., "Alpa: Automating Inter- and Intra-Operator Parallelism for Distributed Deep
// Learning", OSDI 2022, section 5.2, Eq. 2-3). A synchronous pipeline of S stages over B
// micro-batches takes sum_i t_i + (B - 1) * max_j t_j (the first micro-batch fills every stage,
// the slowest stage paces the rest); for each candidate t_max the DP finds the contiguous split
// of least sum with every stage at or below t_max, and the best t_max wins. Each stage's memory
// (its state plus the micro-batches in flight on it, as Merak balances compute against memory)
// must fit the device, so a split that only balances time cannot overfill the first stage of a
// 1F1B schedule. docs/PLANNER.md, "Pipeline stages".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::plan {

// One pipeline layer (the model family's layering: embedding, blocks, final norm and head).
struct LayerCost {
  double seconds = 0;           // forward + backward (+ recompute) of one micro-batch
  double state_bytes = 0;       // parameters, gradients and optimizer state it holds
  double activation_bytes = 0;  // kept from one micro-batch's forward for its backward
};

struct StageSplitRequest {
  int stages = 1;
  int64_t micro_batches = 1;
  // Micro-batches whose activations a stage holds at once, per stage (in_flight_micro_batches);
  // empty: one each.
  std::vector<int64_t> in_flight;
  double memory_bytes = 0;  // per device; 0: unbounded
};

struct StageSplit {
  bool feasible = false;
  std::vector<int>
      first_layer;  // stages + 1 entries: stage s is [first_layer[s], first_layer[s+1])
  std::vector<double> stage_seconds, stage_bytes;
  double max_stage_seconds = 0;
  double pipeline_seconds = 0;  // sum of stage times + (micro_batches - 1) * the slowest
  // Infeasible: the least any split's fullest stage needs (what the device would have to hold).
  double least_stage_bytes = 0;
};

// Activations a stage holds at once: "gpipe" every micro-batch, "1f1b" (and "interleaved:V" by
// its first chunk) stages - s, at most the micro-batches. An Error naming an unknown schedule.
std::vector<int64_t> in_flight_micro_batches(const std::string& schedule, int stages,
                                             int64_t micro_batches);

// The split of `layers` into request.stages contiguous non-empty stages of least pipeline time
// whose every stage fits request.memory_bytes. An Error when there are fewer layers than stages.
StageSplit split_stages(const std::vector<LayerCost>& layers, const StageSplitRequest& request);

// The same objective for a given split (first_layer as in StageSplit), for checks and reports.
StageSplit evaluate_split(const std::vector<LayerCost>& layers, const StageSplitRequest& request,
                          const std::vector<int>& first_layer);

}  // namespace tessel::plan
