// SPDX-License-Identifier: Apache-2.0
// From the chosen strategies to plan rules and the plan's JSON (shard_plan.h).
#include "tessel/plan/shard_plan.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tessel/core/error.h"

namespace tessel::plan {
namespace {

using sharding::Placement;

// The unit of a Colwise split whose output is viewed with its cut dim broken into smaller dims
// (heads of head_dim), by a merged op (RoPE) or by the next group (attention): the elements of
// one piece of the view's cut dim.
int64_t colwise_unit(const ShardModel& m, int group, const GroupStrategy& st) {
  const Graph& g = *m.graph;
  int64_t unit = 1;
  for (size_t c = 0; c < g.ops.size(); ++c) {
    const OpNode& op = g.ops[c];
    if (op.phase != Phase::Forward) continue;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const int64_t p = op.producers[k];
      if (p < 0 || m.group_of[size_t(p)] != group) continue;
      const OpNode& prod = g.ops[size_t(p)];
      for (size_t out = 0; out < prod.outputs.size(); ++out) {
        if (prod.outputs[out].storage != op.inputs[k].storage) continue;
        auto it = st.outputs.find({int(p), int(out)});
        if (it == st.outputs.end() || !it->second.is_shard()) continue;
        const Shape& from = prod.outputs[out].shape;
        const Shape& to = op.inputs[k].shape;
        const auto q = view_placement(it->second, from, to, m.tp);
        if (!q || !q->is_shard()) continue;
        const int64_t a = from[size_t(it->second.dim)], b = to[size_t(q->dim)];
        if (b < a && a % b == 0) unit = std::max(unit, a / b);
      }
    }
  }
  return unit;
}

// Under sequence parallelism, the Sequence style on every module that runs on the rank's piece of
// the sequence: the norms and embeddings the solution places so, and each Dropout whose input is
// such a piece at run time (a sequence piece in the solution, or a pending sum, which the style
// of the product that made it reduce-scatters into pieces before the dropout runs).
void sequence_rules(const ShardModel& m, const ShardSolution& solution,
                    std::vector<ShardPlanRule>& rules) {
  const Graph& g = *m.graph;
  std::set<std::string> seen;
  auto add = [&](const std::string& module) {
    if (!module.empty() && seen.insert(module).second) rules.push_back({module, "Sequence"});
  };
  for (size_t v = 0; v < m.groups.size(); ++v) {
    const ShardGroup& group = m.groups[v];
    const GroupStrategy& st = group.strategies[size_t(solution.choice[v])];
    if ((group.op == "layer_norm" || group.op == "rms_norm" || group.op == "embedding") &&
        st.style == "Sequence")
      add(group.module);
    for (int id : group.members) {
      const OpNode& op = g.ops[size_t(id)];
      if (op.kernel != "dropout" || op.module < 0) continue;
      const ModuleInfo& mod = g.modules[size_t(op.module)];
      const Placement p = st.outputs.at({id, 0});
      const Shape& shape = op.outputs[0].shape;
      const bool piece =
          p.is_partial() || (p.is_shard() && shape.ndim() >= 2 && p.dim == int(shape.ndim()) - 2);
      if (mod.type == "Dropout" && piece) add(mod.path);
    }
  }
}

}  // namespace

std::string layer_pattern(const std::string& path) {
  std::string out, part;
  auto flush = [&] {
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    out += digits ? "*" : part;
    part.clear();
  };
  for (char c : path) {
    if (c == '.') {
      flush();
      out += '.';
    } else {
      part += c;
    }
  }
  flush();
  return out;
}

std::vector<ShardPlanRule> shard_plan_rules(const ShardModel& m, const ShardSolution& solution) {
  TESSEL_CHECK(solution.choice.size() == m.groups.size(), "shard plan: a solution of ",
               solution.choice.size(), " choices for ", m.groups.size(), " groups");
  const Graph& g = *m.graph;
  std::vector<ShardPlanRule> rules;
  std::set<std::string> vocab_parallel;  // modules whose parameter is split by vocabulary
  for (size_t v = 0; v < m.groups.size(); ++v) {
    const ShardGroup& group = m.groups[v];
    const GroupStrategy& st = group.strategies[size_t(solution.choice[v])];
    if (group.op == "embedding" && st.style == "VocabParallel") {
      rules.push_back({group.module, "VocabParallel"});
      vocab_parallel.insert(group.module);
    }
  }
  if (m.sequence_parallel) sequence_rules(m, solution, rules);
  for (size_t v = 0; v < m.groups.size(); ++v) {
    const ShardGroup& group = m.groups[v];
    const GroupStrategy& st = group.strategies[size_t(solution.choice[v])];
    if (group.op != "linear" || st.style == "replicated") continue;
    const OpNode& op = g.ops[size_t(group.anchor)];
    if (group.module_type != "Linear") {
      // The LM head multiplying with a vocab-split embedding's rows: VocabParallel covers it.
      bool tied = false;
      for (size_t u = 0; u < m.groups.size(); ++u)
        if (m.groups[u].op == "embedding" && vocab_parallel.contains(m.groups[u].module) &&
            g.ops[size_t(m.groups[u].anchor)].inputs[0].storage == op.inputs[1].storage)
          tied = st.style == "Colwise";
      TESSEL_CHECK(tied, "shard plan: the solution splits the product in '", group.module, "' (",
                   st.style, "), which is a ", group.module_type,
                   ", not an nn::Linear that a style can split");
      // Its whole input enters the tensor-parallel region there: the gradient arriving at it is
      // a per-rank addend to be all-reduced (Megatron's f), which the norm before it applies.
      for (const ShardUse& use : m.uses) {
        if (use.consumer != group.anchor || use.input != 0) continue;
        const ShardGroup& norm = m.groups[size_t(m.group_of[size_t(use.producer)])];
        TESSEL_CHECK(norm.module_type == "LayerNorm" || norm.module_type == "RMSNorm",
                     "shard plan: the vocab-split product in '", group.module, "' reads '",
                     norm.module, "' (a ", norm.module_type,
                     "); only a norm can hand it its input (Sequence with gather_output)");
        ShardPlanRule entry{norm.module, "Sequence"};
        entry.gather_output = true;
        std::erase_if(rules, [&](const ShardPlanRule& r) { return r.pattern == norm.module; });
        rules.push_back(entry);
      }
      continue;
    }
    ShardPlanRule rule{group.module, st.style};
    if (st.style == "Colwise") {
      rule.blocks = st.blocks;
      rule.unit = colwise_unit(m, int(v), st);
    } else {
      // Rowwise: a whole input is sliced by each rank itself.
      for (const ShardUse& use : m.uses)
        if (use.consumer == group.anchor && use.input == 0) {
          const int u = m.group_of[size_t(use.producer)];
          const GroupStrategy& pst =
              m.groups[size_t(u)].strategies[size_t(solution.choice[size_t(u)])];
          rule.input_is_sharded = pst.outputs.at({use.producer, use.output}).is_shard();
        }
    }
    rules.push_back(rule);
  }
  // Fold layers: a pattern replaces its paths when every module it matches has the same rule.
  std::map<std::string, std::vector<const ShardPlanRule*>> by_pattern;
  for (const ShardPlanRule& r : rules) by_pattern[layer_pattern(r.pattern)].push_back(&r);
  std::map<std::string, size_t> modules_matching;
  for (const ModuleInfo& mod : g.modules) ++modules_matching[layer_pattern(mod.path)];
  std::vector<ShardPlanRule> out;
  std::set<std::string> done;
  for (const ShardPlanRule& r : rules) {
    const std::string pattern = layer_pattern(r.pattern);
    const auto& same = by_pattern[pattern];
    bool uniform = pattern != r.pattern && same.size() == modules_matching[pattern];
    for (const ShardPlanRule* other : same) {
      ShardPlanRule a = *other, b = r;
      a.pattern = b.pattern = "";
      uniform = uniform && a == b;
    }
    if (!uniform) {
      out.push_back(r);
    } else if (done.insert(pattern).second) {
      ShardPlanRule folded = r;
      folded.pattern = pattern;
      out.push_back(folded);
    }
  }
  return out;
}

std::string shard_plan_json(const std::vector<ShardPlanRule>& rules, const std::string& about) {
  nlohmann::ordered_json j;
  j["# about"] = about;
  for (const ShardPlanRule& r : rules) {
    if (r.style == "Colwise" && (r.blocks > 1 || r.unit > 1)) {
      nlohmann::ordered_json rule = {{"style", r.style}};
      if (r.blocks > 1) rule["blocks"] = r.blocks;
      if (r.unit > 1) rule["unit"] = r.unit;
      j[r.pattern] = rule;
    } else if (r.style == "Sequence" && r.gather_output) {
      j[r.pattern] = {{"style", r.style}, {"gather_output", true}};
    } else if (r.style == "Rowwise" && !r.input_is_sharded) {
      j[r.pattern] = {{"style", r.style}, {"input_is_sharded", false}};
    } else {
      j[r.pattern] = r.style;
    }
  }
  return j.dump(2) + "\n";
}

}  // namespace tessel::plan
