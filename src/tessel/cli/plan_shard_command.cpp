// SPDX-License-Identifier: Apache-2.0
// `tessel plan shard`: intra-operator sharding by integer programming (docs/PLANNER.md,
// "Intra-operator sharding"): traces a training step of the model, solves the sharding ILP along a
// tp axis of the cluster with CBC and writes the solution as a tensor-parallel plan that
// `tessel train --tp N --tp-plan FILE` runs.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>

#include "tessel/cli/commands.h"
#include "tessel/cli/shard_plan_file.h"
#include "tessel/core/error.h"
#include "tessel/io/mapped_file.h"
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
  ShardRequest request;
};

void run_shard(const ShardArgs& a) {
  const models::ConfigPtr config = train::resolve_model_config(a.model, "plan shard --model");
  const plan::Cluster cluster = a.cluster.empty()
                                    ? plan::Cluster::parse(kDefaultCluster, "built-in h100-sxm")
                                    : plan::Cluster::load(a.cluster);
  const std::string text = solve_shard_plan(*config, cluster, a.request, stderr);
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
  cmd->add_option("--tp", args->request.tp, "Tensor-parallel ranks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-b,--batch", args->request.batch, "Sequences per micro-batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-t,--seq", args->request.seq,
                  "Tokens per sequence (default: the model's context)");
  cmd->add_option(
      "--cluster", args->cluster,
      "Cluster description TOML (default: the values of configs/clusters/h100-sxm.toml)");
  cmd->add_option("--memory", args->request.memory,
                  "Memory budget per rank in bytes (default: the cluster's device memory)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dtype", args->request.dtype, "Compute dtype whose peak the cost model uses")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  cmd->add_flag("--sp", args->request.sequence_parallel,
                "Plan for sequence parallelism (the plan then runs with --sp: norms, residual "
                "adds and dropouts on sequence pieces)");
  cmd->add_option("-o,--output", args->output, "Plan file to write (default: standard output)");
  cmd->callback([args] { run_shard(*args); });
}

}  // namespace tessel::cli
