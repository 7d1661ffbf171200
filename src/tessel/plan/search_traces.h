// SPDX-License-Identifier: Apache-2.0
// What the plan search (plan/search.h) traces and keeps between layouts: whole traces of one
// rank's step, the stages a composed pipeline rank is made of (plan/pipeline_compose.h), and the
// memory model's state terms, each kept by what changes it. Internal to plan/.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <string>

#include "tessel/models/causal_lm.h"
#include "tessel/plan/cluster.h"
#include "tessel/plan/graph.h"
#include "tessel/plan/memory_model.h"
#include "tessel/plan/pipeline_compose.h"
#include "tessel/plan/step_cost.h"

namespace tessel::plan {

// Shape-only traces of one rank's step, kept by what changes them: the micro-batch, recomputation,
// gradients held and ZeRO-2's buffers, tp and sequence parallelism, and under pp the rank, schedule
// and micro-batches (the rest of a layout does not change one rank's step). The least recently used
// are dropped beyond max_ops ops in all (a pipeline rank's trace holds its whole schedule: a 175B
// GPT's search over 64 GPUs kept 3.6 GB of them within 45 s), so a returned graph is valid until
// the next get.
class Traces {
 public:
  Traces(const models::ModelConfig& config, int64_t max_ops) : config_(config), max_ops_(max_ops) {}
  const Graph& get(const MemoryLayout& m);
  int count() const { return count_; }

 private:
  struct Entry {
    Graph graph;
    std::list<std::string>::iterator recent;  // its place in recent_
  };
  const models::ModelConfig& config_;
  int64_t max_ops_;
  std::map<std::string, Entry> graphs_;
  std::list<std::string> recent_;  // keys, most recently used first
  int64_t cached_ops_ = 0;
  int count_ = 0;
};

// The memory model's state terms (estimate_state) of one rank, kept by what they depend on:
// tp, dp, the ZeRO stage and its runtime, the bucket cap, and under pp the kinds and lengths of
// the rank's stages (ranks whose stages are alike hold alike state; the buckets' parameter names
// are those of the first such rank).
class States {
 public:
  explicit States(const models::ModelConfig& config) : config_(config) {}
  const MemoryEstimate& get(const MemoryLayout& m);

 private:
  const models::ModelConfig& config_;
  std::map<std::string, MemoryEstimate> states_;
};

// One pipeline rank of a layout predicted: its memory, its part of the step, its model FLOPs
// (forward and backward, the whole schedule). `first`: pipeline rank 0's layout (the schedule
// the step model reads). Whole: from the rank's trace of its whole schedule; else composed
// from its stages.
struct RankPrediction {
  MemoryEstimate memory;
  PipelineRankCost cost;
  double flops = 0;
};
RankPrediction predict_pipeline_rank(const Cluster& cluster, const models::ModelConfig& config,
                                     const MemoryLayout& layout, const MemoryLayout& first,
                                     bool whole, Traces& traces, StageTraces& stages,
                                     States& states);

}  // namespace tessel::plan
