// SPDX-License-Identifier: Apache-2.0
// `tessel plan trace`: the shape-only trace of one training step of a model (docs/PLANNER.md,
// "Trace"): FLOPs, bytes and saved activations per module and in total, as a table or JSON.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tessel/cli/commands.h"
#include "tessel/core/error.h"
#include "tessel/plan/graph_json.h"
#include "tessel/plan/trace.h"
#include "tessel/train/model_presets.h"

namespace tessel::cli {

namespace {

struct TraceArgs {
  std::string model;
  int64_t batch = 1;
  int64_t seq = 0;
  std::string recompute = "none";
  std::string dtype = "f32";
  int depth = 2;
  bool json = false;
  bool ops = false;
};

std::string fmt(double value, const char* unit, double scale) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f %s", value / scale, unit);
  return buf;
}

void print_table(const plan::Graph& g, const TraceArgs& a) {
  using plan::Phase;
  const auto fwd = g.module_costs(true, int(Phase::Forward));
  const auto bwd = g.module_costs(true, int(Phase::Backward));
  const auto rec = g.module_costs(true, int(Phase::Recompute));
  const auto all = g.module_costs(true);
  const auto saved = g.module_saved_bytes_inclusive();
  std::printf("%-28s %-18s %12s %12s %12s %12s %12s\n", "module", "type", "fwd GFLOP", "bwd GFLOP",
              "recomp GFLOP", "traffic GB", "saved MiB");
  for (size_t m = 0; m < g.modules.size(); ++m) {
    const int depth = g.depth(int(m));
    if (depth > a.depth) continue;
    const std::string name = std::string(size_t(2 * depth), ' ') +
                             (g.modules[m].path.empty() ? "<model>" : g.modules[m].path);
    std::printf("%-28s %-18s %12.3f %12.3f %12.3f %12.3f %12.2f\n", name.c_str(),
                g.modules[m].type.c_str(), fwd[m].flops / 1e9, bwd[m].flops / 1e9,
                rec[m].flops / 1e9, (all[m].bytes_read + all[m].bytes_written) / 1e9,
                saved[m] / double(1 << 20));
  }
  std::cout << "\n";
  for (Phase p : {Phase::Forward, Phase::Backward, Phase::Recompute}) {
    const plan::Cost c = g.phase_total(p);
    std::printf("%-10s %8lld ops  %s (matmul %s)  read %s  written %s\n",
                std::string(plan::phase_name(p)).c_str(), static_cast<long long>(c.ops),
                fmt(c.flops, "GFLOP", 1e9).c_str(), fmt(c.matmul_flops, "GFLOP", 1e9).c_str(),
                fmt(c.bytes_read, "GB", 1e9).c_str(), fmt(c.bytes_written, "GB", 1e9).c_str());
  }
  const plan::Cost t = g.total();
  std::printf("%-10s %8lld ops  %s (matmul %s)  read %s  written %s\n", "step",
              static_cast<long long>(t.ops), fmt(t.flops, "GFLOP", 1e9).c_str(),
              fmt(t.matmul_flops, "GFLOP", 1e9).c_str(), fmt(t.bytes_read, "GB", 1e9).c_str(),
              fmt(t.bytes_written, "GB", 1e9).c_str());
  std::printf("saved activations %s, parameters %lld (%s)\n",
              fmt(g.saved_bytes, "MiB", double(1 << 20)).c_str(),
              static_cast<long long>(g.parameter_count),
              fmt(g.parameter_bytes, "MiB", double(1 << 20)).c_str());
}

void run_trace(const TraceArgs& a) {
  const models::ConfigPtr config = train::resolve_model_config(a.model, "plan trace --model");
  plan::TraceOptions options;
  options.batch = a.batch;
  options.seq = a.seq;
  options.recompute = nn::parse_recompute(a.recompute);
  options.compute_dtype = dtype_from_name(a.dtype);
  const int64_t seq = options.seq > 0 ? options.seq : config->max_positions();
  const plan::Graph g = plan::trace_training_step(*config, options);
  const double tokens = double(a.batch * seq);
  const double formula = config->flops_per_token(seq) * tokens;
  if (a.json) {
    nlohmann::json out = {{"model", config->summary()},
                          {"batch", a.batch},
                          {"seq", seq},
                          {"recompute", a.recompute},
                          {"dtype", a.dtype},
                          {"formula_model_flops", formula},
                          {"formula_recompute_flops",
                           config->recompute_flops_per_token(options.recompute, seq) * tokens}};
    out["graph"] = nlohmann::json::parse(plan::graph_json(g, {.max_depth = a.depth, .ops = a.ops}));
    std::cout << out.dump() << std::endl;
    return;
  }
  std::cout << "# " << config->summary() << ", batch " << a.batch << " x " << seq
            << " tokens, recompute " << a.recompute << ", " << a.dtype << "\n";
  print_table(g, a);
  std::printf(
      "the family's MFU formula: %s per step (the trace's matmul FLOPs differ by the "
      "vector parameters and the attention diagonal: docs/PLANNER.md)\n",
      fmt(formula, "GFLOP", 1e9).c_str());
}

}  // namespace

void add_plan_trace_command(CLI::App& plan) {
  auto args = std::make_shared<TraceArgs>();
  CLI::App* cmd = plan.add_subcommand(
      "trace", "Trace one training step shape-only: FLOPs, bytes, saved activations per module");
  cmd->add_option("-m,--model", args->model,
                  "A preset (124M, llama:tiny), config.json or model dir")
      ->required();
  cmd->add_option("-b,--batch", args->batch, "Sequences per micro-batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-t,--seq", args->seq, "Tokens per sequence (default: the model's context)");
  cmd->add_option("--recompute", args->recompute, "none, selective or full")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Compute dtype: f32, or bf16 / f16 autocast")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  cmd->add_option("--depth", args->depth, "Module depth to list (0: the model only)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON instead of a table");
  cmd->add_flag("--ops", args->ops, "With --json: include every op node");
  cmd->callback([args] { run_trace(*args); });
}

}  // namespace tessel::cli
