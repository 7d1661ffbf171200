// SPDX-License-Identifier: Apache-2.0
#include "tessel/cli/shard_plan_file.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "tessel/plan/shard_plan.h"
#include "tessel/plan/trace.h"

namespace tessel::cli {

std::vector<plan::ShardPlanRule> solve_shard_rules(const models::ModelConfig& config,
                                                   const plan::Cluster& cluster,
                                                   const ShardRequest& a, std::FILE* summary) {
  const models::TensorParallelSpec spec = config.tensor_parallel(a.tp);
  plan::TraceOptions trace;
  trace.batch = a.batch;
  trace.seq = a.seq;
  trace.compute_dtype = dtype_from_name(a.dtype);
  const plan::Graph graph = plan::trace_training_step(config, trace);

  plan::ShardGraphOptions options;
  options.tp = a.tp;
  options.dtype = a.dtype;
  options.memory_budget = a.memory;
  options.sequence_parallel = a.sequence_parallel;
  const std::string& w = spec.vocab_parallel_weight;
  options.vocab_parallel_modules = {w.substr(0, w.rfind('.'))};
  const plan::ShardModel model = plan::build_shard_model(graph, cluster, options);
  plan::ShardSolution solution;
  try {
    solution = plan::solve_shard_ilp(model.problem);
  } catch (const Error& e) {
    if (!a.sequence_parallel) throw;
    // Under --sp the stream between the tensor-parallel regions is in sequence pieces, which an
    // op without a sharding rule (replicated only) cannot take: name them.
    // Layer indices folded ("h.*.moe"), as the plan's patterns are.
    std::set<std::string> whole;
    for (const plan::ShardGroup& g : model.groups)
      if (g.op.empty() && !g.module.empty()) whole.insert(plan::layer_pattern(g.module));
    std::string names;
    for (const std::string& m : whole) names += (names.empty() ? "" : ", ") + m;
    TESSEL_FAIL(e.what(),
                whole.empty()
                    ? std::string()
                    : " (under --sp the activations between the tensor-parallel regions are "
                      "sequence pieces, and these modules' ops have no sequence placement: " +
                          names + ")");
  }
  const auto rules = plan::shard_plan_rules(model, solution);

  const int64_t seq = a.seq > 0 ? a.seq : config.max_positions();
  if (summary) {
    std::fprintf(summary,
                 "plan shard: %s, batch %lld x %lld, tp = %d%s on %s\n"
                 "  %zu forward ops merged into %zu nodes, %zu edges; ILP: %d variables (%d "
                 "integer), %d constraints; CBC %.3f s, %lld branch nodes\n"
                 "  predicted step: %.3f ms compute + %.3f ms communication; %.5g MiB per rank "
                 "(budget %.5g MiB)\n",
                 config.summary().c_str(), static_cast<long long>(a.batch),
                 static_cast<long long>(seq), a.tp,
                 a.sequence_parallel ? " with sequence parallelism" : "", cluster.name.c_str(),
                 static_cast<size_t>(std::count_if(
                     graph.ops.begin(), graph.ops.end(),
                     [](const plan::OpNode& op) { return op.phase == plan::Phase::Forward; })),
                 model.groups.size(), model.problem.edges.size(), solution.variables,
                 solution.integer_variables, solution.constraints, solution.solve_seconds,
                 static_cast<long long>(solution.branch_nodes), solution.compute_seconds * 1e3,
                 solution.communication_seconds * 1e3, solution.memory_bytes / double(1 << 20),
                 model.problem.memory_budget / double(1 << 20));
    for (const plan::ShardPlanRule& r : rules)
      std::fprintf(summary, "  %-24s %s\n", r.pattern.c_str(), r.style.c_str());
  }
  return rules;
}

std::string shard_plan_text(const models::ModelConfig& config, const plan::Cluster& cluster,
                            const ShardRequest& a, const std::vector<plan::ShardPlanRule>& rules,
                            const std::string& micro_batches) {
  const int64_t seq = a.seq > 0 ? a.seq : config.max_positions();
  const std::string batch =
      micro_batches.empty() ? "batch " + std::to_string(a.batch) : "micro-batches " + micro_batches;
  return plan::shard_plan_json(
      rules, "tensor-parallel plan found by `tessel plan shard` (sharding ILP solved by CBC) for " +
                 config.summary() + ", tp = " + std::to_string(a.tp) +
                 (a.sequence_parallel ? " with sequence parallelism (run it with --sp)" : "") +
                 ", " + batch + " x " + std::to_string(seq) + " on " + cluster.name);
}

std::string solve_shard_plan(const models::ModelConfig& config, const plan::Cluster& cluster,
                             const ShardRequest& a, std::FILE* summary) {
  return shard_plan_text(config, cluster, a, solve_shard_rules(config, cluster, a, summary));
}

}  // namespace tessel::cli
