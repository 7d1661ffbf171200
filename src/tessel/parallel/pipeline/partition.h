// SPDX-License-Identifier: Apache-2.0
// Stage partitioning for pipeline parallelism: which contiguous range of layers each pipeline
// stage owns. The model is seen as an ordered list of layers with one abstract cost each
// (parameter count or measured time; this layer never looks at a model), e.g. "embedding",
// "h.0".."h.{L-1}", "head". The embedding always lands on the first stage and the head on the
// last, as in Megatron-LM (which keeps the tied embedding in sync between the two).
//
// balance() is the exact solution of the linear partition problem (minimise the largest stage
// cost over contiguous splits); explicit_partition() takes user-given block counts per stage.
// With interleaving, partition into ranks * virtual stages and place stage s on rank_of_stage.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessel::parallel::pipeline {

struct LayerCost {
  std::string name;
  double cost = 0.0;  // >= 0; any unit, only ratios matter
};

struct StagePartition {
  std::vector<int64_t> first;  // first layer of each stage; first[0] == 0, strictly increasing
  int64_t layers = 0;          // number of layers in the model

  int64_t num_stages() const { return static_cast<int64_t>(first.size()); }
  // Layers of stage s as [begin, end).
  std::pair<int64_t, int64_t> layers_of(int64_t stage) const;
  int64_t stage_of(int64_t layer) const;
  // Number of layers in each stage.
  std::vector<int64_t> sizes() const;

  bool operator==(const StagePartition&) const = default;
};

std::vector<double> stage_costs(const StagePartition& partition,
                                const std::vector<LayerCost>& costs);
double max_stage_cost(const StagePartition& partition, const std::vector<LayerCost>& costs);
// max / mean of the stage costs: 1 is perfect balance, and the pipeline runs at the pace of the
// slowest stage, so this is the slowdown against an ideal split.
double imbalance(const StagePartition& partition, const std::vector<LayerCost>& costs);

// The contiguous partition into `stages` non-empty stages with the smallest maximum stage cost
// (exact). Among optimal partitions the earliest stages take as many layers as they can, so the
// result is deterministic. Requires 1 <= stages <= costs.size() and finite costs >= 0.
StagePartition balance(const std::vector<LayerCost>& costs, int64_t stages);

// A block is a layer named "h.<n>". Layers before the first block join stage 0, layers after the
// last block join the last stage; a non-block layer between blocks is an error.
bool is_block_name(const std::string& name);

// Parses block counts per stage, "3,4,4,2": stage s gets the next count[s] blocks; the layers
// before the first block (embedding) go with the first stage, the layers after the last block
// (final norm, head) with the last. The counts must be positive integers summing to the number of
// blocks in `layer_names`.
StagePartition explicit_partition(const std::string& spec,
                                  const std::vector<std::string>& layer_names);

// The inverse of explicit_partition: block counts per stage, "3,4,4,2". Throws when the partition
// puts a leading or trailing non-block layer anywhere but the first or last stage.
std::string to_spec(const StagePartition& partition, const std::vector<std::string>& layer_names);

std::vector<std::string> layer_names(const std::vector<LayerCost>& costs);

// The rank that runs stage s of ranks * v stages (Megatron-LM's interleaved assignment, the same
// as Schedule::owner).
int64_t rank_of_stage(int64_t stage, int64_t ranks);

}  // namespace tessel::parallel::pipeline
