// SPDX-License-Identifier: Apache-2.0
// `tessel plan offload`: the offload model's prediction for one process, one tensor-parallel rank,
// one data-parallel rank (ZeRO-1, 2 or 3), one pipeline rank, or one rank of their products
// (dp x tp, dp x pp, pp x tp, dp x pp x tp), or an expert-parallel rank under dp, training with
// memory.* budgets (docs/PLANNER.md,
// "Offload"): where every chunk list lives at start, the device working set, the per-step traffic
// between the tiers (train.jsonl's offload_* names) and, with a cluster description, the step
// time the disk allows beside the compute's.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessel/cli/commands.h"
#include "tessel/cli/offload_traffic_json.h"
#include "tessel/cli/plan_layout.h"
#include "tessel/core/error.h"
#include "tessel/plan/memory_model.h"
#include "tessel/plan/offload_model.h"
#include "tessel/plan/step_cost.h"
#include "tessel/train/config.h"
#include "tessel/train/metrics/metrics.h"
#include "tessel/train/model_presets.h"

namespace tessel::cli {

namespace {

struct OffloadArgs {
  std::string model;
  std::string precision = "fp32";
  std::string chunk_size = "64MiB", device_budget, host_budget = "0", nvme_budget = "0";
  bool nvme = false;
  int64_t micro_batch = 1, seq = 0, grad_accum = 1;
  int tp = 1, tp_rank = 0;
  int dp = 1, zero = 3;
  int ep = 1;
  int64_t bucket_mb = 25;  // parallel.bucket_mb
  int pp = 1, pp_rank = 0;
  std::string schedule = "1f1b";
  bool clipped = false;
  std::string tp_plan;
  bool sp = false;
  bool etp = false;
  int steps = 4;
  std::string cluster;
  double disk_read_gbps = 0, disk_write_gbps = 0;  // override the cluster's [storage]
  bool json = false;
};

void run_offload(const OffloadArgs& a) {
  const models::ConfigPtr config = train::resolve_model_config(a.model, "plan offload --model");
  const DType compute = precision_dtype(a.precision);
  plan::OffloadBudgets b;
  b.chunk_bytes = int64_t(train::parse_byte_size("--chunk-size", a.chunk_size));
  b.device_budget = int64_t(train::parse_byte_size("--device-budget", a.device_budget));
  b.host_budget = int64_t(train::parse_byte_size("--host-budget", a.host_budget));
  b.nvme = a.nvme;
  b.nvme_budget = int64_t(train::parse_byte_size("--nvme-budget", a.nvme_budget));
  TESSEL_CHECK(a.nvme || b.nvme_budget == 0, "plan offload: --nvme-budget without --nvme");
  // A tensor-parallel rank offloads its own pieces as one process does.
  TESSEL_CHECK(a.tp_rank >= 0 && a.tp_rank < a.tp, "plan offload: --tp-rank ", a.tp_rank,
               " is not a rank of --tp ", a.tp);
  plan::MemoryLayout layout;
  layout.micro_batch = a.micro_batch;
  layout.seq = a.seq;
  layout.grad_accum = a.grad_accum;
  layout.compute_dtype = compute;
  TESSEL_CHECK(!a.etp || (a.tp > 1 && config->has_experts()),
               "plan offload: --etp splits each expert's FFN over --tp, so it needs --tp 2 or "
               "more and a mixture-of-experts model (got --tp ",
               a.tp, ", ", config->summary(), ")");
  set_tensor_parallel(layout, a.tp, a.tp_rank, a.tp_plan, a.sp,
                      a.seq > 0 ? a.seq : config->max_positions(), a.etp);
  layout.dp = a.dp;
  layout.zero_stage = a.dp > 1 ? a.zero : 0;
  layout.bucket_bytes = a.bucket_mb << 20;
  set_data_parallel(layout);
  TESSEL_CHECK(a.pp_rank >= 0 && a.pp_rank < a.pp, "plan offload: --pp-rank ", a.pp_rank,
               " is not a rank of --pp ", a.pp);
  if (a.pp > 1)
    layout.pipeline = pipeline_rank(*config, a.schedule, a.pp, int(a.grad_accum), a.pp_rank, "",
                                    layout.tp_transform);
  const bool tp_sums =
      a.dp > 1 && a.tp > 1 && tp_sums_gradients(*config, a.tp, a.tp_rank, a.tp_plan, a.sp);
  const plan::OffloadInput input = offload_input_for(*config, layout, b, tp_sums, a.clipped, a.ep);
  const plan::OffloadPrediction p = plan::predict_offload(input, a.steps);
  const plan::OffloadTraffic& s = p.steady();

  // With a cluster: the step's compute (the step time model of one process) and the disk's time
  // for the step's NVMe bytes; the tier overlaps the two (prefetch along the trace, writes in
  // flight), so the step is predicted as the longer of them.
  nlohmann::json times;
  if (!a.cluster.empty() || (a.disk_read_gbps > 0 && a.disk_write_gbps > 0)) {
    double read_bw = a.disk_read_gbps * 1e9, write_bw = a.disk_write_gbps * 1e9;
    double compute_s = 0;
    if (!a.cluster.empty()) {
      const plan::Cluster cluster = plan::Cluster::load(a.cluster).with_devices(a.tp * a.dp * a.pp);
      if (cluster.storage && read_bw <= 0) read_bw = cluster.storage->read_bandwidth;
      if (cluster.storage && write_bw <= 0) write_bw = cluster.storage->write_bandwidth;
      // The step time model has no expert parallelism: under --ep the disk's time alone.
      if (a.ep == 1) {
        compute_s = predict_step_time(cluster, *config, layout, a.schedule, a.pp,
                                      trace_ranks(*config, layout, a.schedule, a.pp))
                        .total();
        times["compute_ms"] = 1e3 * compute_s;
      }
    }
    TESSEL_CHECK(read_bw > 0 && write_bw > 0, "plan offload: ", a.cluster,
                 " has no [storage] table (read_bandwidth, write_bandwidth): give the disk's "
                 "bandwidths with --disk-read-gbps and --disk-write-gbps");
    const double io_s = plan::offload_io_seconds(s, read_bw, write_bw);
    times["disk_read_gbps"] = read_bw / 1e9;
    times["disk_write_gbps"] = write_bw / 1e9;
    times["nvme_ms"] = 1e3 * io_s;
    times["step_ms"] = 1e3 * std::max(io_s, compute_s);
    times["io_bound"] = io_s > compute_s;
  }

  if (a.json) {
    nlohmann::json out = {{"model", config->summary()},
                          {"precision", a.precision},
                          {"chunk_bytes", p.chunk_bytes},
                          {"chunks", p.chunks},
                          {"state_bytes", p.state_bytes},
                          {"device_working_set", p.device_working_set},
                          {"nvme_file_bytes", p.nvme_file_bytes},
                          {"start_nvme_write_bytes", p.start_nvme_write_bytes}};
    for (const plan::OffloadGroup& g : p.groups)
      out["groups"].push_back({{"name", g.name},
                               {"chunks", g.chunks},
                               {"device", g.device},
                               {"host", g.host},
                               {"nvme", g.nvme}});
    for (const plan::OffloadTraffic& t : p.steps) out["steps"].push_back(offload_traffic_json(t));
    out["steady"] = offload_traffic_json(s);
    if (!times.is_null()) out["time"] = times;
    std::cout << out.dump() << std::endl;
    return;
  }
  std::printf("# %s, %s, %d chunks of %s (state %s), device working set %d chunks\n",
              config->summary().c_str(), a.precision.c_str(), p.chunks,
              train::format_bytes(double(p.chunk_bytes)).c_str(),
              train::format_bytes(double(p.state_bytes)).c_str(), p.device_working_set);
  std::printf("%-8s %7s %7s %7s %7s   (chunks at start)\n", "group", "chunks", "device", "host",
              "nvme");
  for (const plan::OffloadGroup& g : p.groups)
    std::printf("%-8s %7d %7d %7d %7d\n", g.name.c_str(), g.chunks, g.device, g.host, g.nvme);
  std::printf("%-6s %12s %12s %12s %12s  %s\n", "step", "nvme read", "nvme write", "host->dev",
              "dev->host", "evictions (clean)");
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const plan::OffloadTraffic& t = p.steps[i];
    std::printf("%-6zu %12s %12s %12s %12s  %lld (%lld)%s\n", i + 1,
                train::format_bytes(double(t.nvme_read_bytes)).c_str(),
                train::format_bytes(double(t.nvme_write_bytes)).c_str(),
                train::format_bytes(double(t.h2d_bytes)).c_str(),
                train::format_bytes(double(t.d2h_bytes)).c_str(),
                static_cast<long long>(t.evictions), static_cast<long long>(t.clean_evictions),
                i == 0 ? "  LRU while the step is recorded" : "");
  }
  if (!times.is_null()) {
    if (times.contains("compute_ms"))
      std::printf("compute %.1f ms, ", times["compute_ms"].get<double>());
    std::printf("NVMe %.1f ms at %.2f / %.2f GB/s read / write: step %.1f ms (%s bound)\n",
                times["nvme_ms"].get<double>(), times["disk_read_gbps"].get<double>(),
                times["disk_write_gbps"].get<double>(), times["step_ms"].get<double>(),
                times["io_bound"].get<bool>() ? "I/O" : "compute");
  }
}

}  // namespace

void add_plan_offload_command(CLI::App& plan) {
  auto a = std::make_shared<OffloadArgs>();
  CLI::App* cmd = plan.add_subcommand(
      "offload", "Predict memory offload's placement and per-step tier traffic of one rank");
  cmd->add_option("-m,--model", a->model, "A preset (124M, xl, llama:tiny), config.json or dir")
      ->required();
  cmd->add_option("--precision", a->precision, "fp32, or bf16 / fp16 over f32 master weights")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--chunk-size", a->chunk_size, "memory.chunk_size")->capture_default_str();
  cmd->add_option("--device-budget", a->device_budget, "memory.device_budget")->required();
  cmd->add_option("--host-budget", a->host_budget, "memory.host_budget")->capture_default_str();
  cmd->add_flag("--nvme", a->nvme, "memory.nvme_dir is set (an NVMe tier below the host)");
  cmd->add_option("--nvme-budget", a->nvme_budget,
                  "memory.nvme_budget (0: a swap-file slot for every chunk)")
      ->capture_default_str();
  cmd->add_option("-b,--micro-batch", a->micro_batch, "Rows per micro-batch (step time only)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-t,--seq", a->seq, "Tokens per row (step time only; default the context)");
  cmd->add_option("--dp", a->dp, "Data-parallel ranks (each offloads its own ZeRO shards; rank 0)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--ep", a->ep,
                  "Expert-parallel ranks dividing --dp (rank 0: 1/ep of every MoE layer's experts)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--zero", a->zero, "ZeRO stage under --dp (f32 or bf16)")
      ->check(CLI::Range(1, 3))
      ->capture_default_str();
  cmd->add_option("--bucket-mb", a->bucket_mb,
                  "Under --dp at ZeRO-1/2: the gradient bucket size, MiB (parallel.bucket_mb)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--clipped", a->clipped,
                "Under --dp: the steps clip their gradients (a scaling pass over the shards)");
  cmd->add_option("--pp", a->pp, "Pipeline ranks (each offloads its stages' state)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--pp-rank", a->pp_rank, "The pipeline rank to predict")->capture_default_str();
  cmd->add_option("--schedule", a->schedule,
                  "Pipeline schedule: gpipe, 1f1b, interleaved or interleaved:V (--grad-accum "
                  "micro-batches)")
      ->capture_default_str();
  cmd->add_option("--tp", a->tp, "Tensor-parallel ranks (each offloads its own pieces)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--tp-rank", a->tp_rank, "The tensor-parallel rank to predict")
      ->capture_default_str();
  cmd->add_option("--tp-plan", a->tp_plan,
                  "Tensor-parallel plan JSON (default: the family's built-in plan)");
  cmd->add_flag("--sp", a->sp, "Sequence parallelism with --tp");
  cmd->add_flag("--etp", a->etp,
                "Expert tensor parallelism with --tp: each expert's FFN split over the tp ranks "
                "(parallel.expert_tensor_parallel)");
  cmd->add_option("--grad-accum", a->grad_accum, "Micro-batches per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--steps", a->steps, "Steps to simulate (the first evicts by LRU)")
      ->check(CLI::Range(2, 100))
      ->capture_default_str();
  cmd->add_option("--cluster", a->cluster,
                  "Cluster description (TOML): the compute's step time and its [storage] disk");
  cmd->add_option("--disk-read-gbps", a->disk_read_gbps, "The disk's read bandwidth, GB/s")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--disk-write-gbps", a->disk_write_gbps, "The disk's write bandwidth, GB/s")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", a->json, "Print JSON instead of a table");
  cmd->callback([a] { run_offload(*a); });
}

}  // namespace tessel::cli
