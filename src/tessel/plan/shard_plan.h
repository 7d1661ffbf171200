// SPDX-License-Identifier: Apache-2.0
// The sharding ILP's solution as a tensor-parallel plan (parallel/tensor/plan.h's JSON, which
// `tessel train --tp-plan FILE` applies): each matrix product the solution splits becomes its
// Linear module's Colwise or Rowwise rule (a Colwise product whose output is split into blocks,
// and whose blocks are viewed as heads, gets "blocks" and "unit"), a vocabulary-split embedding
// VocabParallel, and the norm that feeds an LM head multiplying with its rows Sequence with
// gather_output (the head's input enters the tensor-parallel region there). Under sequence
// parallelism the norms, embeddings and dropouts that run on sequence pieces get Sequence. Layers
// that chose alike are folded into one pattern ("h.*.mlp.c_fc"). The rest (attention per head,
// adds, the loss) follows from its neighbours at run time and needs no rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/plan/shard_graph.h"

namespace tessel::plan {

struct ShardPlanRule {
  std::string pattern;  // a module path, or a pattern with '*' for layer indices
  std::string style;    // Colwise, Rowwise, VocabParallel, Sequence
  int64_t blocks = 1, unit = 1;
  bool input_is_sharded = true;
  bool gather_output = false;  // Sequence on the norm before a vocab-split LM head
  bool operator==(const ShardPlanRule&) const = default;
};

// "h.11.mlp.c_fc" -> "h.*.mlp.c_fc": every all-digit component of a module path becomes '*' (the
// patterns a plan's rules fold layers into).
std::string layer_pattern(const std::string& path);

// The rules of `solution` (one per module, then folded over layer indices). Throws when the
// solution splits a product that no style can split (not inside an nn::Linear, not tied to a
// vocab-parallel embedding).
std::vector<ShardPlanRule> shard_plan_rules(const ShardModel& model, const ShardSolution& solution);

// The plan file's text, with `about` as its "# about" comment.
std::string shard_plan_json(const std::vector<ShardPlanRule>& rules, const std::string& about);

}  // namespace tessel::plan
