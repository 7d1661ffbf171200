// SPDX-License-Identifier: Apache-2.0
// `tessel plan search`: every layout of a model's training step over a cluster, predicted,
// pruned by memory and ranked by step time (plan/search.h; docs/PLANNER.md, "Plan search"). The
// table gives each ranked layout's step time, tokens/s, MFU and memory per rank, then why the
// others were not ranked, and the `tessel train` command that runs the best.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tessel/cli/commands.h"
#include "tessel/cli/offload_traffic_json.h"
#include "tessel/cli/plan_check.h"
#include "tessel/cli/plan_layout.h"
#include "tessel/cli/plan_search.h"
#include "tessel/cli/plan_serve.h"
#include "tessel/cli/shard_plan_file.h"
#include "tessel/core/error.h"
#include "tessel/io/mapped_file.h"
#include "tessel/train/config.h"
#include "tessel/train/model_presets.h"

namespace tessel::cli {

namespace {

double mib(double bytes) {
  return bytes / 1048576.0;
}

nlohmann::json plan_json(const plan::PlanResult& r) {
  const plan::Layout& l = r.layout;
  nlohmann::json j = {{"layout", l.str()},
                      {"dp", l.dp},
                      {"tp", l.tp},
                      {"sp", l.sp},
                      {"tp_plan", l.tp_plan},
                      {"pp", l.pp},
                      {"zero_stage", l.zero_stage},
                      {"recompute", l.recompute_spec()},
                      {"micro_batch", l.micro_batch},
                      {"grad_accum", l.grad_accum},
                      {"status", std::string(plan::status_name(r.status))}};
  if (l.pp > 1) {
    j["schedule"] = l.schedule;
    j["pipeline_split"] = l.pipeline_split;
    j["composed"] = r.composed;
    for (double peak : r.rank_peaks) j["rank_peak_bytes"].push_back(int64_t(peak));
  }
  // Every row's own command, not only the best's: a benchmark that sets a row's prediction
  // against a run needs the exact arguments the planner would launch for it.
  j["train_args"] = l.train_args();
  if (!r.reason.empty()) j["reason"] = r.reason;
  if (r.status == plan::PlanStatus::Ranked || r.status == plan::PlanStatus::OutOfMemory) {
    j["step_ms"] = 1e3 * r.step_seconds;
    j["tokens_per_s"] = r.tokens_per_second;
    j["mfu"] = r.mfu;
    j["compute_ms"] = 1e3 * r.time.compute_seconds;
    j["optimizer_ms"] = 1e3 * r.time.optimizer_seconds;
    j["dp_comm_ms"] = 1e3 * r.time.dp_comm_seconds;
    j["dp_exposed_ms"] = 1e3 * r.time.dp_exposed_seconds;
    j["tp_comm_ms"] = 1e3 * r.time.tp_comm_seconds;
    j["pp_comm_ms"] = 1e3 * r.time.pp_comm_seconds;
    j["op_overhead_ms"] = 1e3 * r.time.overhead_seconds;
    j["load_ms"] = 1e3 * r.time.load_seconds;
    j["bubble_ms"] = 1e3 * r.time.bubble_seconds;
    j["bubble_fraction"] = r.time.bubble_fraction;
    j["mem_peak_bytes"] = int64_t(r.memory.peak());
    j["state_bytes"] = int64_t(r.memory.state());
    j["step_peak_bytes"] = int64_t(r.memory.step());
  }
  if (l.offloaded()) {
    nlohmann::json o = offload_traffic_json(r.offload);
    o["device_budget"] = l.offload_device_budget;
    o["host_budget"] = l.offload_host_budget;
    o["chunk_bytes"] = l.offload_chunk_bytes;
    o["nvme_dir"] = l.offload_nvme_dir;
    o["plain_bytes"] = int64_t(r.offload_plain_bytes);
    o["nvme_ms"] = 1e3 * r.offload_io_seconds;
    j["offload"] = std::move(o);
  }
  if (r.stages.feasible) {
    j["stage_first_layer"] = r.stages.first_layer;
    j["pipeline_ms"] = 1e3 * r.stages.pipeline_seconds;
  }
  return j;
}

struct SearchArgs {
  std::string model, cluster, precision = "fp32";
  plan::SearchRequest request;
  std::vector<int> zero = {0, 1, 2, 3};
  std::vector<std::string> recompute = {"none", "selective", "full"};
  std::vector<std::string> schedules = {"1f1b", "gpipe", "interleaved"};
  std::string sequence_parallel = "both";
  std::string attention = "fused";     // or "unfused" (plan/unfused_attention.h)
  std::string stage_split = "both";    // balanced, dp or both (SearchRequest::dp_stages)
  std::string rank_recompute = "on";   // SearchRequest::rank_recompute
  std::string block_recompute = "on";  // SearchRequest::block_recompute
  std::vector<std::string> tp_plans;   // plan files searched beside the built-in plan
  std::string shard_plans;  // a folder: the sharding ILP's plan for each tp, searched too
  double bucket_mb = 25;
  bool offload = false;
  std::string offload_host = "0", offload_chunk = "64MiB", offload_nvme_dir;
  int top = 10;
  bool json = false;
  std::shared_ptr<PlanCheckOptions> check;  // bare `tessel plan` only: --check and its options
};

// The sharding ILP's tensor-parallel plans (shard_plan_file.h) for each layout's tp, micro-batch
// and sequence parallelism the search meets (a tp that divides the devices and the heads; every
// micro-batch that divides a dp rank's rows at some pp, up to --max-micro-batch; each of
// --sequence-parallel's values), on the search's cluster and precision. The ILP's choice can
// change with the micro-batch (its activations against the weights, its memory), so each is
// solved; micro-batches whose plans are the same share one file: DIR/tpN.json when every
// micro-batch of the tp has the same plan, else DIR/tpN-mbM.json (M the smallest of its
// micro-batches), with "-sp" before ".json" for sequence parallelism. Returns the files, each
// with the tp, micro-batches and sp it holds for (SearchRequest::tp_plan_scopes). A micro-batch
// where no placement fits the device is reported and left out.
std::vector<std::pair<std::string, plan::SearchRequest::PlanScope>> write_shard_plans(
    const models::ModelConfig& config, const plan::Cluster& description,
    const plan::SearchRequest& request, const std::string& dir) {
  const int devices = request.devices > 0 ? request.devices : description.num_devices();
  const plan::Cluster cluster = description.with_devices(devices);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TESSEL_CHECK(!ec, "plan search: --shard-plans ", dir, ": cannot create it: ", ec.message());
  const int64_t pipeline_layers = config.num_layers() + 2;
  std::vector<std::pair<std::string, plan::SearchRequest::PlanScope>> out;
  for (int tp = 2; tp <= devices; ++tp) {
    if (devices % tp != 0 || config.num_heads() % tp != 0) continue;
    std::set<int64_t> micro_batches;
    for (int pp = 1; pp <= devices / tp && pp <= pipeline_layers; ++pp) {
      if ((devices / tp) % pp != 0) continue;
      const int64_t dp = devices / tp / pp;
      if (request.global_batch % dp != 0) continue;
      const int64_t rows = request.global_batch / dp;
      for (int64_t mb = 1; mb <= rows; ++mb)
        if (rows % mb == 0 && (request.max_micro_batch <= 0 || mb <= request.max_micro_batch))
          micro_batches.insert(mb);
    }
    // Under sequence parallelism the styles move activations otherwise, and the plan must name
    // the Sequence modules: a plan of its own for each value searched.
    for (bool sp : request.sequence_parallel) {
      // Each distinct plan's rules with every micro-batch they were solved for, in the order
      // first met.
      std::vector<std::pair<std::vector<plan::ShardPlanRule>, std::set<int64_t>>> plans;
      ShardRequest r;
      r.tp = tp;
      r.seq = request.seq;
      r.dtype = std::string(dtype_name(request.compute_dtype));
      r.sequence_parallel = sp;
      const char* with = sp ? " with sequence parallelism" : "";
      for (int64_t mb : micro_batches) {
        r.batch = mb;
        std::vector<plan::ShardPlanRule> rules;
        try {
          rules = solve_shard_rules(config, cluster, r, nullptr);
        } catch (const Error& e) {
          std::fprintf(stderr,
                       "plan search: no sharding ILP plan for tp %d%s at micro-batch %lld: %s\n",
                       tp, with, static_cast<long long>(mb), e.what());
          continue;
        }
        auto same = std::find_if(plans.begin(), plans.end(),
                                 [&](const auto& p) { return p.first == rules; });
        if (same == plans.end()) same = plans.insert(plans.end(), {std::move(rules), {}});
        same->second.insert(mb);
      }
      for (const auto& [rules, mbs] : plans) {
        const std::string name = "tp" + std::to_string(tp) +
                                 (plans.size() == 1 ? "" : "-mb" + std::to_string(*mbs.begin())) +
                                 (sp ? "-sp" : "") + ".json";
        const std::string path = (std::filesystem::path(dir) / name);
        std::string list;
        for (int64_t mb : mbs) list += (list.empty() ? "" : ", ") + std::to_string(mb);
        r.batch = *mbs.begin();
        const std::string text =
            shard_plan_text(config, cluster, r, rules, mbs.size() > 1 ? list : std::string());
        io::write_file_atomic(path, text.data(), text.size());
        std::fprintf(stderr,
                     "plan search: the sharding ILP's plan for tp %d%s (micro-batch%s %s): %s\n",
                     tp, with, mbs.size() == 1 ? "" : "es", list.c_str(), path.c_str());
        out.push_back({path, {tp, mbs, sp}});
      }
    }
  }
  return out;
}

void run_search(SearchArgs a) {
  const models::ConfigPtr config = train::resolve_model_config(a.model, "plan search --model");
  const plan::Cluster cluster = plan::Cluster::load(a.cluster);
  a.request.compute_dtype = precision_dtype(a.precision);
  a.request.bucket_bytes = int64_t(a.bucket_mb * double(1 << 20));
  a.request.zero_stages = a.zero;
  a.request.recompute.clear();
  for (const std::string& r : a.recompute) a.request.recompute.push_back(nn::parse_recompute(r));
  a.request.schedules = a.schedules;
  a.request.sequence_parallel = a.sequence_parallel == "both" ? std::vector<bool>{false, true}
                                : a.sequence_parallel == "on" ? std::vector<bool>{true}
                                                              : std::vector<bool>{false};
  a.request.unfused_attention = a.attention == "unfused";
  a.request.tp_plans = {""};
  for (const std::string& f : a.tp_plans) a.request.tp_plans.push_back(f);
  if (!a.shard_plans.empty())
    for (auto& [file, scope] : write_shard_plans(*config, cluster, a.request, a.shard_plans)) {
      a.request.tp_plans.push_back(file);
      a.request.tp_plan_scopes[file] = std::move(scope);
    }
  a.request.balanced_stages = a.stage_split != "dp";
  a.request.dp_stages = a.stage_split != "balanced";
  a.request.rank_recompute = a.rank_recompute == "on";
  a.request.block_recompute = a.block_recompute == "on";
  TESSEL_CHECK(!a.request.unfused_attention || !a.check || !a.check->enabled,
               "plan: --check measures tessel's runtime, whose attention is one fused kernel; "
               "it cannot check predictions made with --attention unfused");
  set_runtime_layouts(a.request, config);
  if (a.offload) {
    // On a CPU node the device and host tiers are the same memory; only NVMe takes state out.
    TESSEL_CHECK(!a.offload_nvme_dir.empty(),
                 "plan: --offload needs --offload-nvme-dir (on a CPU "
                 "node the device and host tiers are the same memory: only an NVMe tier takes "
                 "state out of it)");
    a.request.offload_chunk_bytes =
        int64_t(train::parse_byte_size("--offload-chunk-size", a.offload_chunk));
    a.request.offload_host_bytes =
        int64_t(train::parse_byte_size("--offload-host-budget", a.offload_host));
    a.request.offload_nvme_dir = a.offload_nvme_dir;
    // Each rank as the trainer offloads it: tp rank 0 of the family's plan (as the search traces
    // it), its ZeRO shards, its pipeline stages.
    a.request.offload_input = [config](const plan::MemoryLayout& l, const plan::OffloadBudgets& b) {
      const bool sums =
          l.dp > 1 && l.tp > 1 && tp_sums_gradients(*config, l.tp, 0, l.tp_plan, l.message_seq > 0);
      return offload_input_for(*config, l, b, sums, false);
    };
  }
  // A search of many devices takes minutes: after the first two seconds each factorisation's
  // end is reported on stderr.
  const auto started = std::chrono::steady_clock::now();
  a.request.progress = [started](int done, int total, int dp, int tp, int pp, int64_t layouts) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (s < 2) return;
    std::fprintf(stderr,
                 "[plan search] %d/%d factorisations (dp %d tp %d pp %d), %lld layouts, %.0f s\n",
                 done, total, dp, tp, pp, (long long)layouts, s);
  };
  const plan::SearchResult res = plan::search_plans(*config, cluster, a.request);
  if (a.check && a.check->enabled) {
    run_plan_check(*a.check, {a.model, a.precision, std::llround(a.bucket_mb), a.top, a.json}, res,
                   cluster);
    return;
  }

  if (a.json) {
    nlohmann::json out = {{"model", res.model},
                          {"cluster", cluster.name},
                          {"devices", res.devices},
                          {"device_memory_bytes", int64_t(res.device_memory_bytes)},
                          {"global_batch", res.global_batch},
                          {"seq", res.seq},
                          {"traces", res.traces},
                          {"stage_traces", res.stage_traces}};
    out["ranked"] = nlohmann::json::array();
    out["pruned"] = nlohmann::json::array();
    for (size_t i = 0; i < res.ranked.size() && int(i) < a.top; ++i)
      out["ranked"].push_back(plan_json(res.ranked[i]));
    for (const plan::PlanResult& r : res.pruned) out["pruned"].push_back(plan_json(r));
    if (!res.ranked.empty()) out["train_args"] = plan::best_plan(res).layout.train_args();
    std::cout << out.dump() << std::endl;
    plan::best_plan(res);  // none fits: the one error, after the figures
    return;
  }
  std::printf("# %s on %d x %s (%.0f MiB each, %s), global batch %lld x %lld tokens, %s\n",
              res.model.c_str(), res.devices, cluster.device.kind.c_str(),
              mib(res.device_memory_bytes), cluster.name.c_str(), (long long)res.global_batch,
              (long long)res.seq, a.precision.c_str());
  std::printf("%4s  %-68s %10s %11s %6s %12s %12s\n", "rank", "layout", "step ms", "tokens/s",
              "MFU", "mem/rank MiB", "(state+step)");
  for (size_t i = 0; i < res.ranked.size() && int(i) < a.top; ++i) {
    const plan::PlanResult& r = res.ranked[i];
    const plan::Layout& l = r.layout;
    char mem[64];
    double peak = r.memory.peak();
    if (l.offloaded()) {
      // What the rank holds: the step's memory outside the tiers, the device and host tiers.
      peak = r.offload_plain_bytes + double(l.offload_device_budget + l.offload_host_budget);
      std::snprintf(mem, sizeof mem, "offloaded");
    } else {
      std::snprintf(mem, sizeof mem, "%.1f+%.1f", mib(r.memory.state()), mib(r.memory.step()));
    }
    std::printf("%4zu  %-68s %10.3f %11.1f %5.1f%% %12.1f %12s\n", i + 1, l.str().c_str(),
                1e3 * r.step_seconds, r.tokens_per_second, 100 * r.mfu, mib(peak), mem);
    if (l.offloaded())
      std::printf(
          "      offloaded: %.1f MiB outside the tiers, device tier %.1f MiB, host %.1f "
          "MiB%s; a step reads %.1f MiB and writes %.1f MiB of NVMe (%.1f ms of disk), "
          "compute %.1f ms\n",
          mib(r.offload_plain_bytes), mib(double(l.offload_device_budget)),
          mib(double(l.offload_host_budget)), l.offload_nvme_dir.empty() ? "" : ", NVMe",
          mib(double(r.offload.nvme_read_bytes)), mib(double(r.offload.nvme_write_bytes)),
          1e3 * r.offload_io_seconds, 1e3 * r.time.total());
  }
  if (int(res.ranked.size()) > a.top)
    std::printf("      ... %zu more ranked (--top)\n", res.ranked.size() - size_t(a.top));
  // Why the others were not ranked: each factorisation the models cannot predict or that is
  // invalid, and the layouts out of memory (least memory first, --top of them).
  std::vector<const plan::PlanResult*> oom;
  for (const plan::PlanResult& r : res.pruned)
    if (r.status == plan::PlanStatus::OutOfMemory) oom.push_back(&r);
  std::sort(oom.begin(), oom.end(),
            [](auto* x, auto* y) { return x->memory.peak() < y->memory.peak(); });
  if (!res.pruned.empty()) std::printf("# not ranked (%zu)\n", res.pruned.size());
  for (size_t i = 0; i < oom.size() && int(i) < a.top; ++i)
    std::printf("  %-68s out of memory: %s\n", oom[i]->layout.str().c_str(),
                oom[i]->reason.c_str());
  if (int(oom.size()) > a.top)
    std::printf("  ... %zu more out of memory\n", oom.size() - size_t(a.top));
  for (const plan::PlanResult& r : res.pruned) {
    if (r.status == plan::PlanStatus::OutOfMemory) continue;
    std::string which = "dp=" + std::to_string(r.layout.dp) + " tp=" + std::to_string(r.layout.tp) +
                        " pp=" + std::to_string(r.layout.pp);
    if (r.layout.pp > 1 && !r.layout.schedule.empty()) which += " schedule=" + r.layout.schedule;
    if (r.layout.zero_stage > 0) which += " zero=" + std::to_string(r.layout.zero_stage);
    std::printf("  %s: %s: %s\n", which.c_str(), std::string(plan::status_name(r.status)).c_str(),
                r.reason.c_str());
    if (r.stages.feasible) {
      std::string stages;
      for (size_t s = 0; s + 1 < r.stages.first_layer.size(); ++s)
        stages += (s ? " | " : "") + std::to_string(r.stages.first_layer[s]) + "-" +
                  std::to_string(r.stages.first_layer[s + 1] - 1);
      std::printf("      stage layers by the inter-operator DP (%lld micro-batches, %s): %s\n",
                  (long long)r.layout.grad_accum, r.layout.schedule.c_str(), stages.c_str());
    }
  }
  const plan::PlanResult& best = plan::best_plan(res);
  std::printf("# best: mpirun -np %d tessel train %s\n", res.devices,
              join_args(best.layout.train_args()).c_str());
}

}  // namespace

void set_runtime_layouts(plan::SearchRequest& request, const models::ConfigPtr& model) {
  request.tensor_parallel = [](plan::MemoryLayout& layout, int tp, bool sp,
                               const std::string& plan) {
    set_tensor_parallel(layout, tp, 0, plan, sp, layout.seq);
  };
  request.pipeline_rank = [model](const std::string& schedule, int pp, int microbatches, int rank,
                                  const std::string& split,
                                  const std::function<void(models::CausalLM&)>& tp_transform) {
    return pipeline_rank(*model, schedule, pp, microbatches, rank, split, tp_transform);
  };
  request.data_parallel = [](plan::MemoryLayout& layout) { set_data_parallel(layout); };
}

plan::SearchRequest train_search_request(const train::TrainConfig& c, int devices,
                                         const models::ConfigPtr& model) {
  plan::SearchRequest r;
  set_runtime_layouts(r, model);
  r.devices = devices;
  r.global_batch = c.train.global_batch > 0
                       ? c.train.global_batch
                       : c.train.micro_batch * c.train.grad_accum * int64_t(devices);
  r.seq = c.train.seq_len;
  r.compute_dtype = precision_dtype(c.train.precision);
  r.bucket_bytes = c.parallel.bucket_mb << 20;
  return r;
}

plan::Layout train_layout_of(const train::TrainConfig& c, int dp, int tp, int pp) {
  plan::Layout l;
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  l.sp = tp > 1 && c.parallel.sequence_parallel;
  if (tp > 1) l.tp_plan = c.parallel.tp_plan;
  l.zero_stage = int(c.parallel.zero_stage);
  // One mode, or one per pipeline rank (Layout::rank_recompute), each perhaps on its rank's first
  // blocks only (Layout::recompute_blocks), the others perhaps with another (recompute_rest).
  std::vector<nn::Recompute> modes, rests;
  std::vector<int64_t> counts;
  for (const nn::RankRecompute& e : nn::parse_recompute_entries(c.train.recompute)) {
    modes.push_back(e.mode);
    counts.push_back(e.blocks);
    rests.push_back(e.rest);
  }
  if (modes.size() == 1) {
    l.recompute = modes[0];
  } else {
    l.rank_recompute = modes;
  }
  if (std::any_of(counts.begin(), counts.end(), [](int64_t n) { return n != nn::kAllBlocks; }))
    l.recompute_blocks = counts;
  if (std::any_of(rests.begin(), rests.end(),
                  [](nn::Recompute m) { return m != nn::Recompute::None; }))
    l.recompute_rest = rests;
  l.micro_batch = c.train.micro_batch;
  l.grad_accum = c.train.grad_accum;
  if (pp > 1) {
    l.schedule = c.parallel.schedule;
    l.pipeline_split = c.parallel.pipeline_split;
  }
  return l;
}

std::string join_args(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

namespace {

// The search's options on `cmd`; `required`: --model, --cluster and --global-batch must be given
// (`plan search`), or are checked by the caller (bare `plan`, whose subcommands need none).
void add_search_options(CLI::App* cmd, const std::shared_ptr<SearchArgs>& args, bool required) {
  cmd->add_option("-m,--model", args->model,
                  "A preset (124M, llama:tiny), config.json or model dir")
      ->required(required);
  cmd->add_option("--cluster", args->cluster, "Cluster description (TOML, docs/PLANNER.md)")
      ->required(required);
  cmd->add_option("--devices", args->request.devices,
                  "Ranks to plan for (default: the description's devices)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-B,--global-batch", args->request.global_batch,
                  "Sequences per optimizer step over every dp rank")
      ->required(required)
      ->check(CLI::PositiveNumber);
  cmd->add_option("-t,--seq", args->request.seq, "Tokens per sequence (default: the context)");
  cmd->add_option("--precision", args->precision, "fp32, or bf16 / fp16 over f32 master weights")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--zero", args->zero, "ZeRO stages to search (with dp > 1)")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  cmd->add_option("--recompute", args->recompute, "Recompute modes to search")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->capture_default_str();
  cmd->add_option("--schedules", args->schedules,
                  "Pipeline schedules to search (with pp > 1; interleaved: every number of "
                  "chunks per rank the layers allow)")
      ->check(CLI::IsMember({"1f1b", "gpipe", "interleaved"}))
      ->capture_default_str();
  cmd->add_option("--sequence-parallel", args->sequence_parallel,
                  "Sequence parallelism with tp > 1 layouts (as `tessel train --sp`): off, on or "
                  "both")
      ->check(CLI::IsMember({"off", "on", "both"}))
      ->capture_default_str();
  cmd->add_option("--tp-plan", args->tp_plans,
                  "A tensor-parallel plan JSON to search beside the family's built-in plan "
                  "(parallel.tp_plan; `tessel plan shard` writes them); repeat for more")
      ->check(CLI::ExistingFile);
  cmd->add_option("--shard-plans", args->shard_plans,
                  "A folder: solve the sharding ILP (`tessel plan shard`) for each tp and "
                  "micro-batch and search its plans with those layouts, beside the built-in plan "
                  "(written there as tpN.json, or tpN-mbM.json where micro-batches differ)");
  cmd->add_option("--stage-split", args->stage_split,
                  "Pipeline stage boundaries (interleaved: chunks): balanced (by parameters, "
                  "the trainer's default), dp (Alpa's inter-operator DP over the traced layers, "
                  "run with parallel.pipeline_split) or both")
      ->check(CLI::IsMember({"balanced", "dp", "both"}))
      ->capture_default_str();
  cmd->add_option("--rank-recompute", args->rank_recompute,
                  "With pp > 1, also each pipeline rank's least recomputation that fits "
                  "(train.recompute = \"full,none\"): on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--block-recompute", args->block_recompute,
                  "Also a rank's mode on only as many of its first blocks as its memory needs "
                  "(train.recompute = \"full:3\"), and full on as few with the others "
                  "selective (\"full:2+selective\"): on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  add_attention_option(cmd, args->attention);
  cmd->add_option("--max-micro-batch", args->request.max_micro_batch,
                  "Largest micro-batch to consider (default: any)");
  cmd->add_option("--compose-above", args->request.compose_above,
                  "Compose each pipeline rank from its stages' traces when (micro-batches + "
                  "pp) x pipeline layers exceed this (0: always, -1: never; docs/PLANNER.md, "
                  "\"The search at scale\")")
      ->capture_default_str();
  cmd->add_option("--bucket-mb", args->bucket_mb, "Gradient bucket size (parallel.bucket_mb)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--top", args->top, "Ranked layouts to print")->capture_default_str();
  CLI::Option* offload =
      cmd->add_flag("--offload", args->offload,
                    "Plan the layouts that do not fit the device with memory offload (CPU "
                    "descriptions; docs/PLANNER.md, \"Offload in the search\")");
  cmd->add_option("--offload-host-budget", args->offload_host,
                  "With --offload: each rank's host tier, memory.host_budget (0: five chunks)")
      ->capture_default_str()
      ->needs(offload);
  cmd->add_option("--offload-chunk-size", args->offload_chunk, "With --offload: memory.chunk_size")
      ->capture_default_str()
      ->needs(offload);
  cmd->add_option("--offload-nvme-dir", args->offload_nvme_dir,
                  "With --offload: memory.nvme_dir, an NVMe tier timed at the description's "
                  "[storage] rates")
      ->needs(offload);
  cmd->add_flag("--json", args->json, "Print JSON instead of a table");
}

}  // namespace

void add_plan_search_command(CLI::App& plan) {
  auto args = std::make_shared<SearchArgs>();
  CLI::App* cmd = plan.add_subcommand(
      "search", "Rank the training layouts of a model on a cluster by predicted step time");
  add_search_options(cmd, args, true);
  cmd->callback([args] { run_search(*args); });
}

void add_plan_search_options(CLI::App& plan) {
  auto args = std::make_shared<SearchArgs>();
  add_search_options(&plan, args, false);
  args->check = std::make_shared<PlanCheckOptions>();
  add_plan_check_options(plan, args->check);
  auto serve = std::make_shared<ServePlanArgs>();
  add_plan_serve_options(plan, serve);
  CLI::App* app = &plan;
  // `tessel plan --model M --cluster F --global-batch B`: the ranked plans, as `plan search`
  // prints them; with a subcommand the subcommand runs instead.
  plan.callback([args, serve, app] {
    if (!app->get_subcommands().empty()) return;
    if (serve->enabled) {  // `tessel plan --serve`: the shared options, then the serving plans
      serve->model = args->model;
      serve->cluster = args->cluster;
      serve->devices = args->request.devices;
      serve->json = args->json;
      if (app->count("--top") > 0) serve->top = args->top;
      run_serve_plan(*serve);
      return;
    }
    TESSEL_CHECK(!args->model.empty() && !args->cluster.empty() && args->request.global_batch > 0,
                 "plan: give --model, --cluster and --global-batch to rank the layouts of a "
                 "model on a cluster (as `tessel plan search`), or one of the subcommands "
                 "search, memory, trace, shard, calibrate (tessel plan --help)");
    // --check runs its layouts: three unless --top says otherwise.
    if (args->check->enabled && app->count("--top") == 0) args->top = 3;
    run_search(*args);
  });
}

}  // namespace tessel::cli
