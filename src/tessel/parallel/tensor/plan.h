// SPDX-License-Identifier: Apache-2.0
// Tensor-parallel plans: a JSON object mapping module-name patterns to styles, applied to a model
// from outside its code (the idea of PyTorch's parallelize_module plans; the styles are
// Megatron-LM's). Example (GPT-2's default plan, as its model family supplies it):
//
//   { "wte": "VocabParallel", "wpe": "Sequence", "drop": "Sequence",
//     "h.*.ln_1": "Sequence",
//     "h.*.attn.c_attn": {"style": "Colwise", "blocks": 3, "unit": "head_dim"},
//     "h.*.attn.c_proj": "Rowwise", ...,
//     "ln_f": {"style": "Sequence", "gather_output": true} }
//
// Patterns are dotted module paths in which `*` matches one name (any characters but '.'). Styles:
//   Colwise        nn::Linear; options "blocks" (int) and "unit" (int, or a name looked up in
//                  ParallelizeOptions::sizes, such as "head_dim") for fused projections, and
//                  "replicate" (bool): with fewer units than ranks, each unit is held by
//                  ranks / units ranks (K and V projections of grouped-query attention)
//   Rowwise        nn::Linear; option "input_is_sharded" (default true)
//   VocabParallel  nn::Embedding (rows = vocabulary, padded to a multiple of tp)
//   Sequence       LayerNorm, RMSNorm, Dropout, Embedding; option "gather_output"
// Keys starting with '#' are comments. A pattern that matches no module, a module matched by two
// patterns, an unknown style or option, or a style on a module of the wrong kind is an Error that
// names them, raised before any module is changed.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/nn/module.h"
#include "tessel/parallel/tensor/tensor_parallel.h"
#include "tessel/sharding/shard_layout.h"

namespace tessel::parallel {

enum class StyleKind { Colwise, Rowwise, VocabParallel, Sequence };
const char* style_name(StyleKind kind);

struct PlanRule {
  std::string pattern;
  StyleKind style = StyleKind::Colwise;
  int64_t blocks = 1;
  std::string unit = "1";  // an integer, or a name of ParallelizeOptions::sizes
  bool replicate = false;  // Colwise: replicate units when they are fewer than the ranks
  bool input_is_sharded = true;
  bool gather_output = false;
};

struct ParallelPlan {
  std::vector<PlanRule> rules;
  // `origin` names the source in errors (a path, or "built-in").
  static ParallelPlan parse(const std::string& json_text, const std::string& origin);
  static ParallelPlan load(const std::string& path);
};

// True when `path` (dotted module path) matches `pattern` (see above).
bool pattern_matches(const std::string& pattern, const std::string& path);

struct ParallelizeOptions {
  bool sequence_parallel = false;
  std::map<std::string, int64_t> sizes;  // names a plan's "unit" may use
  bool copy_values = true;               // TpOptions::copy_values
};

struct ParallelizeResult {
  std::vector<std::pair<std::string, sharding::ShardLayout>>
      sharded;  // parameter name -> its layout
  // The other parameters (whole on every rank). Under sequence parallelism they are used on
  // sequence pieces, so their gradients are per-rank addends to be summed over tp.
  std::vector<std::string> replicated;
  std::vector<std::pair<std::string, StyleKind>> applied;  // module path -> style, in tree order
  std::shared_ptr<SequenceState> sequence;
  bool sequence_parallel = false;
  // The layout of a parameter name, or null when it is replicated.
  const sharding::ShardLayout* spec(const std::string& name) const;
};

// Applies `plan` to the modules of `root` over `tp` (collective-free: each rank keeps its pieces
// of the weights it holds in full). All checks run before any module is changed.
ParallelizeResult parallelize(nn::Module& root, dist::CommPtr tp, const ParallelPlan& plan,
                              const ParallelizeOptions& options = {});

}  // namespace tessel::parallel
