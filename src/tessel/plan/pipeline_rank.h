// SPDX-License-Identifier: Apache-2.0
// One pipeline rank's part of a training step as plain data, for the planner's memory and step
// models: where the model is cut into stages and the rank's list of actions. The schedules
// themselves (GPipe, 1F1B, interleaved 1F1B; Huang et al. 2019, Narayanan et al. 2021) are made
// by parallel/pipeline, which the planner's layer does not link; a caller above both converts
// one (cli/plan_layout.h), so the planner replays exactly the order the executor runs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessel::plan {

enum class PipelineActionKind {
  Forward,
  Backward,
  SendActivation,
  RecvActivation,
  SendGradient,
  RecvGradient,
};

// As parallel::pipeline::Action: for messages, `stage` is the stage that produced the tensor.
struct PipelineAction {
  PipelineActionKind kind = PipelineActionKind::Forward;
  int microbatch = 0;
  int stage = 0;
};

struct PipelineRank {
  std::string schedule;  // "gpipe", "1f1b", "interleaved:2" (for reports)
  int ranks = 1;         // pp; 1: no pipeline
  int rank = 0;          // this rank's pp coordinate
  int virtual_stages = 1;
  int microbatches = 1;
  // [begin, end) pipeline layers (0: the embedding, 1..L: the blocks, L + 1: the head) of every
  // stage; stage s lives on rank s % ranks.
  std::vector<std::pair<int64_t, int64_t>> stage_layers;
  std::vector<PipelineAction> actions;  // this rank's list, in execution order

  bool active() const { return ranks > 1; }
  int num_stages() const { return int(stage_layers.size()); }
  int owner(int stage) const { return stage % ranks; }
  // The stage holding pipeline layer `layer`.
  int stage_of_layer(int64_t layer) const;
};

}  // namespace tessel::plan
