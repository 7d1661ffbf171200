// SPDX-License-Identifier: Apache-2.0
// `tessel plan shard`: intra-operator sharding by integer programming (docs/PLANNER.md,
// "Intra-operator sharding"): traces a training step of the model, solves the sharding ILP along a
// tp axis of the cluster with CBC and writes the solution as a tensor-parallel plan that
// `tessel train --tp N --tp-plan FILE` runs.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "tessel/cli/commands.h"
#include "tessel/core/error.h"
#include "tessel/io/mapped_file.h"
#include "tessel/plan/shard_plan.h"
#include "tessel/plan/trace.h"
#include "tessel/train/model_presets.h"

namespace tessel::cli {

namespace {

// The values of configs/clusters/h100-sxm.toml (its sources are cited there): the cluster a
// plan is made for when no --cluster is given.
constexpr const char* kDefaultCluster = R"(name = "h100-sxm"
devices_per_node = 8
nodes = 1
[device]
kind = "H100-SXM5-80GB"
memory_bytes = 85899345920
memory_bandwidth = 3.35e12
[device.peak_flops]
f32 = 67e12
tf32 = 494.5e12
bf16 = 989.5e12
f16 = 989.5e12
int8 = 1979e12
[links.intra_node]
bandwidth = 450e9
latency = 0.6e-6
efficiency = 0.8
[links.inter_node]
bandwidth = 50e9
latency = 2.7e-6
[[gemm]]
dtype = "bf16"
m = 2048
n = 2048
k = 13312
flops = 794.5e12
[[gemm]]
dtype = "f16"
m = 2048
n = 2048
k = 13312
flops = 794.5e12
)";

struct ShardArgs {
  std::string model, cluster, output;
  int tp = 2;
  int64_t batch = 8;
  int64_t seq = 0;
  double memory = 0;
  std::string dtype = "f32";
};

void run_shard(const ShardArgs& a) {
  const models::ConfigPtr config = train::resolve_model_config(a.model, "plan shard --model");
  const models::TensorParallelSpec spec = config->tensor_parallel(a.tp);
  const plan::Cluster cluster = a.cluster.empty()
                                    ? plan::Cluster::parse(kDefaultCluster, "built-in h100-sxm")
                                    : plan::Cluster::load(a.cluster);
  plan::TraceOptions trace;
  trace.batch = a.batch;
  trace.seq = a.seq;
  trace.compute_dtype = dtype_from_name(a.dtype);
  const plan::Graph graph = plan::trace_training_step(*config, trace);

  plan::ShardGraphOptions options;
  options.tp = a.tp;
  options.dtype = a.dtype;
  options.memory_budget = a.memory;
  const std::string& w = spec.vocab_parallel_weight;
  options.vocab_parallel_modules = {w.substr(0, w.rfind('.'))};
  const plan::ShardModel model = plan::build_shard_model(graph, cluster, options);
  const plan::ShardSolution solution = plan::solve_shard_ilp(model.problem);
  const auto rules = plan::shard_plan_rules(model, solution);

  const int64_t seq = a.seq > 0 ? a.seq : config->max_positions();
  std::fprintf(stderr,
               "plan shard: %s, batch %lld x %lld, tp = %d on %s\n"
               "  %zu forward ops merged into %zu nodes, %zu edges; ILP: %d variables (%d "
               "integer), %d constraints; CBC %.3f s, %lld branch nodes\n"
               "  predicted step: %.3f ms compute + %.3f ms communication; %.5g MiB per rank "
               "(budget %.5g MiB)\n",
               config->summary().c_str(), static_cast<long long>(a.batch),
               static_cast<long long>(seq), a.tp, cluster.name.c_str(),
               static_cast<size_t>(std::count_if(
                   graph.ops.begin(), graph.ops.end(),
                   [](const plan::OpNode& op) { return op.phase == plan::Phase::Forward; })),
               model.groups.size(), model.problem.edges.size(), solution.variables,
               solution.integer_variables, solution.constraints, solution.solve_seconds,
               static_cast<long long>(solution.branch_nodes), solution.compute_seconds * 1e3,
               solution.communication_seconds * 1e3, solution.memory_bytes / double(1 << 20),
               model.problem.memory_budget / double(1 << 20));
  for (const plan::ShardPlanRule& r : rules)
    std::fprintf(stderr, "  %-24s %s\n", r.pattern.c_str(), r.style.c_str());
  const std::string text = plan::shard_plan_json(
      rules, "tensor-parallel plan found by `tessel plan shard` (sharding ILP solved by CBC) for " +
                 config->summary() + ", tp = " + std::to_string(a.tp) + ", batch " +
                 std::to_string(a.batch) + " x " + std::to_string(seq) + " on " + cluster.name);
  if (a.output.empty()) {
    std::cout << text;
  } else {
    io::write_file_atomic(a.output, text.data(), text.size());
  }
}

}  // namespace

void add_plan_shard_command(CLI::App& plan) {
  auto args = std::make_shared<ShardArgs>();
  CLI::App* cmd = plan.add_subcommand(
      "shard",
      "Choose every op's tensor-parallel placement by integer programming; write the plan");
  cmd->add_option("-m,--model", args->model,
                  "A preset (124M, llama:tiny), config.json or model dir")
      ->required();
  cmd->add_option("--tp", args->tp, "Tensor-parallel ranks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-b,--batch", args->batch, "Sequences per micro-batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-t,--seq", args->seq, "Tokens per sequence (default: the model's context)");
  cmd->add_option(
      "--cluster", args->cluster,
      "Cluster description TOML (default: the values of configs/clusters/h100-sxm.toml)");
  cmd->add_option("--memory", args->memory,
                  "Memory budget per rank in bytes (default: the cluster's device memory)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dtype", args->dtype, "Compute dtype whose peak the cost model uses")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "Plan file to write (default: standard output)");
  cmd->callback([args] { run_shard(*args); });
}

}  // namespace tessel::cli
