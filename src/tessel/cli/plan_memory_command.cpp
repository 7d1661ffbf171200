// SPDX-License-Identifier: Apache-2.0
// `tessel plan memory`: the memory model's bytes per rank for a training layout
// (docs/PLANNER.md, "Memory model"), term by term, as a table or JSON, and with --cluster the
// step time model's figures; the names match the fields `tessel train` writes to train.jsonl, so
// a run's measured figures sit beside the prediction.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tessel/cli/commands.h"
#include "tessel/cli/plan_layout.h"
#include "tessel/core/error.h"
#include "tessel/plan/memory_model.h"
#include "tessel/plan/pipeline_compose.h"
#include "tessel/plan/step_cost.h"
#include "tessel/train/model_presets.h"
#include "tessel/train/pipeline_stage.h"

namespace tessel::cli {

namespace {

struct MemoryArgs {
  std::string model;
  plan::MemoryLayout layout;
  int tp = 1, pp = 1;
  std::string schedule = "1f1b";
  std::string split;  // blocks per stage (parallel.pipeline_split); "": balanced
  std::string tp_plan;
  bool sp = false;  // sequence parallelism with tp (Korthikanti et al. 2022), as train --sp
  std::string recompute = "none";
  std::string precision = "fp32";
  double bucket_mb = 25;
  std::string cluster;    // with it, the step time too
  bool composed = false;  // pipeline ranks from their stages' traces (plan/pipeline_compose.h)
  std::string attention = "fused";         // or "unfused" (plan/unfused_attention.h)
  std::string grad_reduce = "overlapped";  // or "after-backward" (MemoryLayout)
  bool json = false;
};

// Every pipeline rank's memory and, with a cluster, the step time, composed from its stages'
// traces instead of traced over its whole schedule.
struct ComposedRanks {
  std::vector<plan::MemoryEstimate> memory;
  std::optional<plan::StepTime> time;
  std::map<std::string, double> kernel_seconds;  // by kernel, the worst rank's
};
ComposedRanks compose_ranks(const models::ModelConfig& config, const plan::MemoryLayout& layout,
                            const std::string& schedule, const std::string& split, int pp,
                            const std::string& recompute, const plan::Cluster* cluster) {
  ComposedRanks out;
  plan::StageTraces stages(cluster, config);
  std::vector<plan::PipelineRankCost> costs;
  std::vector<plan::ComposedRank> composed;
  plan::MemoryLayout first;
  for (int r = 0; r < pp; ++r) {
    plan::MemoryLayout l = layout;
    set_rank_recompute(l, recompute, r, pp);
    l.pipeline =
        pipeline_rank(config, schedule, pp, int(layout.grad_accum), r, split, layout.tp_transform);
    if (r == 0) first = l;
    composed.push_back(plan::compose_pipeline_rank(stages, config, l));
    const plan::ComposedRank& c = composed.back();
    out.memory.push_back(plan::estimate_memory(config, l, c.step_peak_bytes, 0));
    if (cluster)
      costs.push_back(plan::pipeline_rank_cost(*cluster, c.compute, c.tp_seconds,
                                               c.parameter_tensors, c.message, out.memory.back(),
                                               first));
  }
  if (cluster) {
    out.time = plan::combine_pipeline_ranks(*cluster, costs, first);
    size_t worst = 0;
    for (size_t r = 1; r < out.memory.size(); ++r)
      if (out.memory[r].peak() > out.memory[worst].peak()) worst = r;
    out.kernel_seconds = composed[worst].compute.kernel_seconds;
  }
  return out;
}

void run_memory(MemoryArgs a) {
  const models::ConfigPtr config = train::resolve_model_config(a.model, "plan memory --model");
  // One mode, or one per pipeline rank ("full,none"); the layout carries rank 0's.
  set_rank_recompute(a.layout, a.recompute, 0, a.pp);
  a.layout.compute_dtype = precision_dtype(a.precision);
  a.layout.bucket_bytes = int64_t(a.bucket_mb * double(1 << 20));
  a.layout.unfused_attention = a.attention == "unfused";
  a.layout.overlap_grad_reduce = a.grad_reduce == "overlapped";
  const int64_t seq = a.layout.seq > 0 ? a.layout.seq : config->max_positions();
  set_tensor_parallel(a.layout, a.tp, 0, a.tp_plan, a.sp, seq);
  set_data_parallel(a.layout);
  TESSEL_CHECK(a.split.empty() || a.pp > 1,
               "plan memory: --pipeline-split cuts pipeline stages and needs --pp > 1, got --pp ",
               a.pp);
  TESSEL_CHECK(!a.composed || a.pp > 1,
               "plan memory: --composed composes pipeline ranks from "
               "their stages and needs --pp > 1, got --pp ",
               a.pp);
  std::optional<plan::Cluster> cluster;
  if (!a.cluster.empty())
    cluster = plan::Cluster::load(a.cluster).with_devices(a.layout.dp * a.tp * a.pp);
  // Every pipeline rank holds different stages: each is predicted, and the figures below are the
  // rank with the largest peak.
  RankTraces traced;
  ComposedRanks composed;
  if (a.composed)
    composed = compose_ranks(*config, a.layout, a.schedule, a.split, a.pp, a.recompute,
                             cluster ? &*cluster : nullptr);
  else
    traced = trace_ranks(*config, a.layout, a.schedule, a.pp, a.split, a.recompute);
  const std::vector<plan::MemoryEstimate>& ranks = a.composed ? composed.memory : traced.memory;
  // The stage cut every rank shares, named as the trainer's pipeline line names it.
  const std::string stages =
      a.pp > 1 ? train::pipeline_stages_line(
                     pipeline_rank(*config, a.schedule, a.pp, int(a.layout.grad_accum), 0, a.split,
                                   a.layout.tp_transform)
                         .stage_layers,
                     config->num_layers())
               : std::string();
  size_t worst = 0;
  for (size_t r = 1; r < ranks.size(); ++r)
    if (ranks[r].peak() > ranks[worst].peak()) worst = r;
  const plan::MemoryEstimate& m = ranks[worst];
  std::vector<std::pair<const char*, double>> times;
  nlohmann::json kernels_ms;  // the predicted compute by kernel, the rank's whole step
  if (cluster) {
    const plan::StepTime t = a.composed ? *composed.time
                                        : predict_step_time(*cluster, *config, a.layout, a.schedule,
                                                            a.pp, traced, a.split);
    // A pipeline rank's figures are its whole schedule; any other trace is one micro-batch.
    const double passes = a.pp > 1 ? 1.0 : double(a.layout.grad_accum);
    const auto by_kernel =
        a.composed ? composed.kernel_seconds
                   : plan::graph_compute_time(*cluster, traced.graphs[worst]).kernel_seconds;
    for (const auto& [kernel, s] : by_kernel) kernels_ms[kernel] = 1e3 * s * passes;
    times = {{"compute_ms", 1e3 * t.compute_seconds},
             {"op_overhead_ms", 1e3 * t.overhead_seconds},
             {"load_ms", 1e3 * t.load_seconds},
             {"optimizer_ms", 1e3 * t.optimizer_seconds},
             {"dp_comm_ms", 1e3 * t.dp_comm_seconds},
             {"dp_exposed_ms", 1e3 * t.dp_exposed_seconds},
             {"tp_comm_ms", 1e3 * t.tp_comm_seconds},
             {"pp_comm_ms", 1e3 * t.pp_comm_seconds},
             {"bubble_ms", 1e3 * t.bubble_seconds},
             {"bubble_fraction", t.bubble_fraction},
             {"step_ms", 1e3 * t.total()}};
  }
  const std::pair<const char*, double> terms[] = {
      {"param_bytes", m.param_bytes},
      {"grad_bytes", m.grad_bytes},
      {"optimizer_bytes", m.optimizer_bytes},
      {"comm_bytes", m.comm_bytes},
      {"state_bytes", m.state()},
      {"traced_step_bytes", m.traced_step_bytes},
      {"gradient_buffer_bytes", m.gradient_buffer_bytes},
      {"traced_gradient_buffer_bytes", m.traced_gradient_buffer_bytes},
      {"gathered_bytes", m.gathered_bytes},
      {"step_peak_bytes", m.step()},
      {"mem_peak_bytes", m.peak()},
      {"saved_activation_bytes", m.saved_activation_bytes},
      {"korthikanti_bytes", m.korthikanti_bytes},
  };
  if (a.json) {
    nlohmann::json out = {{"model", config->summary()},
                          {"dp", a.layout.dp},
                          {"tp", a.tp},
                          {"pp", a.pp},
                          {"zero_stage", a.layout.zero_stage},
                          {"micro_batch", a.layout.micro_batch},
                          {"seq", seq},
                          {"recompute", a.recompute},
                          {"sp", a.sp},
                          {"precision", a.precision},
                          {"composed", a.composed},
                          {"attention", a.attention},
                          {"grad_reduce", a.grad_reduce},
                          {"parameter_count", m.parameter_count},
                          {"buckets", int64_t(m.buckets.size())}};
    for (const auto& [name, v] : terms) out[name] = int64_t(v);
    for (const auto& [name, v] : times) out[name] = v;
    if (!kernels_ms.is_null()) out["kernels_ms"] = kernels_ms;
    if (a.pp > 1) {
      out["schedule"] = a.schedule;
      out["pipeline_split"] = a.split;
      out["stages"] = stages;
      out["pp_rank"] = int(worst);
      for (const plan::MemoryEstimate& e : ranks)
        out["pp_ranks"].push_back({{"state_bytes", int64_t(e.state())},
                                   {"step_peak_bytes", int64_t(e.step())},
                                   {"mem_peak_bytes", int64_t(e.peak())}});
    }
    std::cout << out.dump() << std::endl;
    return;
  }
  std::cout << "# " << config->summary() << ", dp " << a.layout.dp << ", tp " << a.tp
            << (a.sp ? " (sp)" : "") << ", pp " << a.pp
            << (a.pp > 1 ? " (" + a.schedule + ", rank " + std::to_string(worst) + ")" : "")
            << ", ZeRO " << a.layout.zero_stage << ", micro-batch " << a.layout.micro_batch
            << ", recompute " << a.recompute << ", " << a.precision
            << (a.layout.unfused_attention ? ", unfused attention" : "")
            << (a.layout.overlap_grad_reduce ? "" : ", gradients reduced after backward")
            << " (bytes per rank)\n";
  for (const auto& [name, v] : terms)
    std::printf("%-24s %14.0f  %10.3f MiB\n", name, v, v / 1048576);
  for (const auto& [name, v] : times) std::printf("%-24s %14.3f\n", name, v);
  if (a.pp > 1) std::printf("stages %s\n", stages.c_str());
  if (a.pp > 1)
    for (size_t r = 0; r < ranks.size(); ++r)
      std::printf("pp rank %-16zu %14.0f  %10.3f MiB\n", r, ranks[r].peak(),
                  ranks[r].peak() / 1048576);
}

}  // namespace

void add_plan_memory_command(CLI::App& plan) {
  auto args = std::make_shared<MemoryArgs>();
  CLI::App* cmd =
      plan.add_subcommand("memory", "Predict one rank's training memory for a layout, by term");
  cmd->add_option("-m,--model", args->model,
                  "A preset (124M, llama:tiny), config.json or model dir")
      ->required();
  cmd->add_option("--dp", args->layout.dp, "Data-parallel ranks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--tp", args->tp, "Tensor-parallel ranks")->check(CLI::PositiveNumber);
  cmd->add_option("--tp-plan", args->tp_plan,
                  "Tensor-parallel plan JSON (default: the family's built-in plan)");
  cmd->add_flag("--sp", args->sp,
                "Sequence parallelism over the tp ranks (as `tessel train --sp`; needs --tp)");
  cmd->add_option("--pp", args->pp, "Pipeline ranks")->check(CLI::PositiveNumber);
  cmd->add_option("--schedule", args->schedule,
                  "Pipeline schedule: gpipe, 1f1b, interleaved or interleaved:V (--grad-accum "
                  "micro-batches)")
      ->capture_default_str();
  cmd->add_option("--pipeline-split", args->split,
                  "Blocks per pipeline stage, e.g. 3,4,4,2, as parallel.pipeline_split (default: "
                  "balanced by parameters, as the trainer cuts them)");
  cmd->add_option("--zero", args->layout.zero_stage, "ZeRO stage over the dp ranks")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  cmd->add_option("--recompute", args->recompute,
                  "none, selective or full; or one per pipeline rank, e.g. full,none; "
                  "full:3 recomputes a rank's first three blocks only, full:3+selective the "
                  "others selectively (as train.recompute)")
      ->capture_default_str();
  cmd->add_option("--precision", args->precision, "fp32, or bf16 / fp16 over f32 master weights")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("-b,--micro-batch", args->layout.micro_batch, "Rows per micro-batch per dp rank")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--grad-accum", args->layout.grad_accum, "Micro-batches per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-t,--seq", args->layout.seq, "Tokens per row (default: the model's context)");
  cmd->add_option("--bucket-mb", args->bucket_mb, "Gradient bucket size (parallel.bucket_mb)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--cluster", args->cluster,
                  "Cluster description (TOML, docs/PLANNER.md): also predict the step time");
  add_attention_option(cmd, args->attention);
  cmd->add_option("--grad-reduce", args->grad_reduce,
                  "When dp's gradient reductions run: overlapped (with the backward, bucket by "
                  "bucket, as tessel runs them) or after-backward (all once it ends, as "
                  "Megatron-LM's local DDP ran them before 2023; time only)")
      ->check(CLI::IsMember({"overlapped", "after-backward"}))
      ->capture_default_str();
  cmd->add_flag("--composed", args->composed,
                "With --pp: compose each rank from one trace per distinct stage instead of "
                "tracing its whole schedule (fast at thousands of micro-batches; as `plan search` "
                "does at scale)");
  cmd->add_flag("--json", args->json, "Print JSON instead of a table");
  cmd->callback([args] { run_memory(*args); });
}

}  // namespace tessel::cli
