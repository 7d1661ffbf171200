// SPDX-License-Identifier: Apache-2.0
// Pipeline stage boundaries by dynamic programming over the layers' costs: Alpa's inter-operator
// pass (Zheng et al., "Alpa: Automating Inter- and Intra-Operator Parallelism for Distributed Deep
// Learning", OSDI 2022, section 5.2, Eq. 2-3). A synchronous pipeline of S stages over B
// micro-batches takes sum_i t_i + (B - 1) * max_j t_j (the first micro-batch fills every stage,
// the slowest stage paces the rest); for each candidate t_max the DP finds the contiguous split
// of least sum with every stage at or below t_max, and the best t_max wins. Each stage's memory
// (its state plus the micro-batches in flight on it, as Merak balances compute against memory)
// must fit the device, so a split that only balances time cannot overfill the first stage of a
// 1F1B schedule. Interleaved schedules (Narayanan et al. 2021: V chunks per rank, chunk c on
// rank c % S) couple chunks S apart, which no contiguous DP captures exactly. Their step, max
// over ranks r of (the first r chunks' times + B * rank r's chunks' sum), is minimised over every
// split where there are few (small models), else by descent from the DP's least bottleneck over
// the S * V chunks (a local optimum; large models' uniform blocks leave few).
// docs/PLANNER.md, "Pipeline stages".
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
  // Chunks per rank (interleaved:V): the split has stages * V chunks, chunk c on rank c % stages;
  // a rank's bytes are its chunks' state plus its in-flight count times their activations.
  int chunks_per_rank = 1;
  // Interleaved: splits enumerated exactly when there are at most this many, else the descent.
  int64_t enumerate_up_to = 200000;
};

struct StageSplit {
  bool feasible = false;
  // stages * chunks_per_rank + 1 entries: stage (chunk) s is [first_layer[s], first_layer[s+1])
  std::vector<int> first_layer;
  std::vector<double> stage_seconds, stage_bytes;  // per stage (chunk)
  std::vector<double> rank_seconds, rank_bytes;    // per rank: the sums of its chunks
  double max_stage_seconds = 0;
  // One chunk per rank: sum of stage times + (micro_batches - 1) * the slowest (Alpa). Interleaved:
  // max over ranks r of (sum of chunks 0..r-1 + micro_batches * rank_seconds[r]), which for equal
  // chunks of time t is Narayanan's (B * V + S - 1) * t.
  double pipeline_seconds = 0;
  // Infeasible: the least any split's fullest stage needs (what the device would have to hold);
  // interleaved: the fullest rank of the split the descent ends at (an upper bound).
  double least_stage_bytes = 0;
};

// Activations a stage holds at once: "gpipe" every micro-batch, "1f1b" (and "interleaved:V" by
// its first chunk) stages - s, at most the micro-batches. An Error naming an unknown schedule.
std::vector<int64_t> in_flight_micro_batches(const std::string& schedule, int stages,
                                             int64_t micro_batches);

// The split of `layers` into request.stages contiguous non-empty stages of least pipeline time
// whose every stage fits request.memory_bytes (exact). With chunks_per_rank V > 1: stages * V
// chunks, exact up to request.enumerate_up_to splits, else by descent (a split no rank of which
// fits is descended on its overflow first). An Error when there are fewer layers than chunks.
StageSplit split_stages(const std::vector<LayerCost>& layers, const StageSplitRequest& request);

// The same objective for a given split (first_layer as in StageSplit), for checks and reports.
StageSplit evaluate_split(const std::vector<LayerCost>& layers, const StageSplitRequest& request,
                          const std::vector<int>& first_layer);

}  // namespace tessel::plan
