// SPDX-License-Identifier: Apache-2.0
// From a traced training step (plan/trace.h) to the sharding ILP (plan/shard_ilp.h) along the
// tensor-parallel mesh axis, as Alpa's intra-operator pass builds it:
//  - the forward ops are merged into groups: an op with a sharding rule (a matrix product, an
//    embedding, a norm, attention, the loss, a residual add) starts a group, and the trivial ops
//    that follow it (bias adds, activations, splits, dropout, reductions of the loss) join the
//    group of their producer, taking the placement it gives them;
//  - a group's strategies are the placement signatures that sharding/op_rules.h declares for its
//    op and that a tensor-parallel style implements (Colwise, Rowwise, VocabParallel, the per-head
//    attention, the vocab-parallel loss, features and pending sums for adds), each with its compute
//    time (the trace's FLOPs and bytes over the cluster's roofline, divided by the ranks when the
//    work is split) and its memory per rank (parameters with gradients and Adam's two moments,
//    and its share of the saved activations);
//  - each dataflow edge costs the redistribution between what the producer's strategy gives and
//    what the consumer's expects, forward and for the gradient backward
//    (sharding::redistribute_cost names the collective, plan/comm_cost.h times it on the cluster);
//    transitions no style runs (an all-gather after a Colwise product, ...) are forbidden, so every
//    solution is a plan the runtime can apply; two uses of one parameter (GPT-2's tied embedding
//    and LM head) must place it alike;
//  - under sequence parallelism the styles' other transitions (reduce-scatter into, all-gather
//    out of sequence pieces) replace the all-reduces, and the norms, adds and embeddings between
//    the tensor-parallel regions gain a sequence placement (Korthikanti et al. 2022).
// docs/PLANNER.md, "Intra-operator sharding", has the formulation and the figures.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessel/core/shape.h"
#include "tessel/plan/cluster.h"
#include "tessel/plan/graph.h"
#include "tessel/plan/shard_ilp.h"
#include "tessel/sharding/placement.h"

namespace tessel::plan {

struct ShardGraphOptions {
  int tp = 2;
  std::string dtype = "f32";  // the compute dtype whose peak the roofline uses
  double memory_budget = 0;   // bytes per rank; 0: the cluster's device memory
  // Module paths whose parameter must be split by vocabulary (the trainer's loss is
  // vocab-parallel: the family's TensorParallelSpec::vocab_parallel_weight).
  std::vector<std::string> vocab_parallel_modules;
  // Sequence parallelism (`--sp`, Korthikanti et al. 2022), as the runtime's styles run it: norms,
  // residual adds and the position embedding may hold the rank's piece of the sequence (the dim
  // before the features); a Colwise product gathers its input from those pieces (all-gather, and
  // reduce-scatter of its gradient) and a Rowwise or VocabParallel pending sum is reduce-scattered
  // into them, where without sp the one is copied into the region and the other all-reduced.
  bool sequence_parallel = false;
};

// One choice for a group: where each tensor it reads and writes lies along the tp axis.
struct GroupStrategy {
  std::string style;                        // "replicated", "Colwise", "heads", ...
  std::vector<sharding::Placement> inputs;  // per anchor input, resolved
  std::vector<sharding::Placement> grads;   // the gradient each activation input receives
  std::map<std::pair<int, int>, sharding::Placement> outputs;  // (op, output) -> placement
  std::map<const void*, sharding::Placement> parameters;       // parameter storage -> placement
  int blocks = 1;      // a split of the sharded output into this many blocks follows the anchor
  bool split = false;  // the work is divided over the ranks
};

struct ShardGroup {
  int anchor = 0;            // index into Graph::ops
  std::vector<int> members;  // anchor first, then the merged ops, in graph order
  std::string op;            // sharding/op_rules.h name, or "" (replicated only)
  std::string module;        // the anchor's module path
  std::string module_type;
  std::vector<GroupStrategy> strategies;  // parallel to the ILP node's strategies
};

// A dataflow edge between groups: input `input` of op `consumer` reads output `output` of op
// `producer`.
struct ShardUse {
  int producer = 0, output = 0, consumer = 0, input = 0;
};

struct ShardModel {
  int tp = 1;
  bool sequence_parallel = false;
  std::vector<ShardGroup> groups;
  std::vector<ShardUse> uses;
  std::vector<int> group_of;  // per Graph op: its group, -1 for ops outside the forward
  const Graph* graph = nullptr;
  ShardProblem problem;
  double backward_factor = 1;  // step FLOPs / forward FLOPs
};

// The shard ILP of `graph`'s forward along a tp axis of `options.tp` ranks of `cluster`. The
// model keeps a pointer to `graph`.
ShardModel build_shard_model(const Graph& graph, const Cluster& cluster,
                             const ShardGraphOptions& options);

// `p` on a tensor of shape `from` as seen through a view of shape `to` (same elements): R and P
// unchanged; S(d) becomes S(e) where the view's dims before e hold exactly the elements of
// `from`'s dims before d and the pieces coincide. nullopt when no dim of the view is cut alike.
std::optional<sharding::Placement> view_placement(sharding::Placement p, const Shape& from,
                                                  const Shape& to, int ranks);

}  // namespace tessel::plan
