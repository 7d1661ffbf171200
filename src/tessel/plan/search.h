// SPDX-License-Identifier: Apache-2.0
// The plan search: every layout of a training step over a cluster's devices — dp × tp × pp
// factorisations of the device count, ZeRO stage, activation recomputation, micro-batch size (and
// so the number of micro-batches) and pipeline schedule — predicted by the memory model
// (plan/memory_model.h) and the step-time model (plan/step_cost.h), pruned where a rank's bytes
// exceed the device's memory, and ranked by predicted step time: the enumerate-prune-rank loop of
// Alpa's and Merak's planners, over the layouts tessel's runtime runs. Tensor- and
// pipeline-parallel layouts are predicted with the runtime's own plan and stage partition
// (supplied in the request); for pipelines the models do not predict, Alpa's inter-operator DP
// (plan/stage_split.h) reports a stage split over the traced layers.
// Which layouts the models can predict is one function (model_coverage); the others are listed
// with the reason, never ranked on a guess. docs/PLANNER.md, "Plan search".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/models/causal_lm.h"
#include "tessel/nn/recompute.h"
#include "tessel/plan/cluster.h"
#include "tessel/plan/memory_model.h"
#include "tessel/plan/offload_model.h"
#include "tessel/plan/stage_split.h"
#include "tessel/plan/step_cost.h"

namespace tessel::plan {

struct SearchRequest {
  int devices = 0;           // ranks of the launch; 0: the cluster description's devices
  int64_t global_batch = 0;  // sequences per optimizer step over every dp rank
  int64_t seq = 0;           // tokens per sequence; 0: the model's context
  DType compute_dtype = DType::F32;
  int64_t bucket_bytes = int64_t(25) << 20;
  std::vector<int> zero_stages = {0, 1, 2, 3};  // searched when dp > 1
  std::vector<nn::Recompute> recompute = {nn::Recompute::None, nn::Recompute::Selective,
                                          nn::Recompute::Full};
  // Under pp, a mode per pipeline rank as well (train.recompute = "full,none"): once a layout
  // has been predicted with each of `recompute` on every rank, each rank takes the least
  // recomputation under which it fits the device (a rank's bytes do not depend on the others'
  // modes, and less recomputation never slows a rank), and where the ranks then differ that
  // layout is predicted too. On the runtime's balanced stage cut, and on each cut the
  // inter-operator DP found (with one of the modes: where some rank needs recomputation on it,
  // the other modes are predicted on that cut first, each a layout of its own).
  bool rank_recompute = true;
  // Finer still, within a rank (train.recompute = "full:3"): a rank that needs a mode takes it on
  // only as many of its blocks, the first ones, as its memory needs, the others recomputing
  // nothing (Megatron-LM's --recompute-num-layers): the fewest found by bisection over the count,
  // every rank at once, each probe a prediction of the layout. On the cuts rank_recompute uses.
  // Where some rank needs full recomputation (selective on every block does not fit it) and
  // selective is searched, the same bisection with the rank's other blocks selective is a layout
  // too ("full:2+selective"): fewer fully recomputed blocks for selective's cheaper recomputation
  // on the rest.
  bool block_recompute = true;
  // Searched when pp > 1; "interleaved" stands for every "interleaved:V" whose pp·V stages the
  // model's pipeline layers hold (V >= 2), with micro-batch counts that are multiples of pp.
  std::vector<std::string> schedules = {"1f1b", "gpipe", "interleaved"};
  int64_t max_micro_batch = 0;  // 0: any
  // The traces kept for reuse, in ops (the least recently used are dropped beyond it; a pipeline
  // rank's trace holds its whole schedule). Results do not depend on it, only the time taken.
  int64_t trace_cache_ops = int64_t(1) << 21;
  // A pipeline layout whose micro-batches plus ranks, times pipeline layers (what tracing every
  // rank's whole schedule costs: each rank builds the model, and the schedule runs every
  // micro-batch through every layer) exceed this has each rank composed from one trace per
  // distinct stage (plan/pipeline_compose.h: the same figures, but ZeRO-3's held units bounded
  // from above) instead; 0: every pipeline layout composed, < 0: none.
  int64_t compose_above = 256;
  // Called after each dp x tp x pp factorisation is searched: how many of how many, that one's
  // sizes, the layouts predicted so far (a search over 1,024 devices takes minutes).
  std::function<void(int done, int total, int dp, int tp, int pp, int64_t layouts)> progress;
  // Tensor and pipeline layouts need the runtime's tensor-parallel transform and its stage
  // partition and schedules, which sit above plan/: cli/plan_layout.h supplies them (as
  // `tessel plan memory` uses them). Without them tp (pp) layouts are not modelled.
  // Sets tp and, with `sp`, sequence parallelism over rows of layout.seq tokens, by the plan file
  // `plan` ("": the family's built-in plan).
  std::function<void(MemoryLayout& layout, int tp, bool sp, const std::string& plan)>
      tensor_parallel;
  // Tensor-parallel plans searched with each tp > 1 layout: "" the family's built-in one, any
  // other a plan JSON (parallel.tp_plan; `tessel plan shard` writes them). A plan that cannot
  // split the model at a tp is listed as invalid with the runtime's reason.
  std::vector<std::string> tp_plans = {""};
  // Plan files that hold for some layouts only (the sharding ILP's, which `plan search
  // --shard-plans` solves per tp, micro-batch and sequence parallelism): a file named here is
  // searched with the layouts of its tp, micro-batches and sequence parallelism only; a file not
  // named here, with every tp > 1 layout.
  struct PlanScope {
    int tp = 0;
    std::set<int64_t> micro_batches;
    bool sp = false;
  };
  std::map<std::string, PlanScope> tp_plan_scopes;
  // Sequence parallelism (Korthikanti et al. 2022) searched with each tp > 1 layout: without,
  // with, or both.
  std::vector<bool> sequence_parallel = {false, true};
  // Every layout's attention costed as unfused kernels (unfused_attention.h): the layouts as a
  // runtime without a fused attention kernel would run them.
  bool unfused_attention = false;
  // Pipeline rank `rank`'s stages and actions; `split`: blocks per stage as
  // parallel.pipeline_split gives them ("3,4,4,2"), "" the runtime's balanced cut, which the
  // trainer makes on the pieces `tp_transform` (empty without tp) leaves on a rank.
  std::function<PipelineRank(const std::string& schedule, int pp, int microbatches, int rank,
                             const std::string& split,
                             const std::function<void(models::CausalLM&)>& tp_transform)>
      pipeline_rank;
  // Stage boundaries of pipeline layouts (interleaved: every chunk's): the runtime's balanced
  // cut (by parameters), Alpa's inter-operator DP over the layers' traced compute
  // (plan/stage_split.h; a layout with the DP's split where it differs, which
  // parallel.pipeline_split runs), or both as separate layouts.
  bool balanced_stages = true, dp_stages = true;
  // ZeRO-2/3 by the runtime's own data parallelism (MemoryLayout::dp_transform; sets it on a
  // layout whose dp, ZeRO stage and bucket size are set). Needed for ZeRO-3 under pp; without it
  // ZeRO-2/3 without pp are counted by the memory model's formula.
  std::function<void(MemoryLayout& layout)> data_parallel;
  // Memory offload (docs/PLANNER.md, "Offload in the search"). With `offload_input` set (the
  // offload model's input for one rank of a layout, cli/plan_layout.h supplies it), a layout whose
  // ranks do not fit the device is planned again with its training state in chunks of
  // offload_chunk_bytes: the host tier gets offload_host_bytes per rank (0: the smallest row the
  // step holds there, five chunks), the device tier what the step leaves of the device's memory,
  // and with offload_nvme_dir set the rest goes to NVMe at the description's [storage] rates.
  // Only on CPU descriptions (the tiers are the same memory; copies over an accelerator's host
  // link are not modelled).
  std::function<OffloadInput(const MemoryLayout& layout, const OffloadBudgets& budgets)>
      offload_input;
  int64_t offload_chunk_bytes = int64_t(64) << 20;
  int64_t offload_host_bytes = 0;
  std::string offload_nvme_dir;  // memory.nvme_dir of the command; "": no NVMe tier
};

// One training layout: what `tessel train` takes as --dp/--tp/--pp, parallel.zero_stage,
// train.recompute, train.micro_batch, train.grad_accum and parallel.schedule.
struct Layout {
  int dp = 1, tp = 1, pp = 1;
  bool sp = false;      // sequence parallelism over the tp ranks (tp > 1)
  std::string tp_plan;  // tp > 1: the plan file (parallel.tp_plan); "": the built-in plan
  int zero_stage = 0;
  nn::Recompute recompute = nn::Recompute::None;
  // pp > 1: one mode per pipeline rank (train.recompute = "full,none"), which then replaces
  // `recompute` (left unread); empty: `recompute` on every rank.
  std::vector<nn::Recompute> rank_recompute;
  // How many of a rank's blocks (its first, in forward order) take its mode, the others none:
  // empty, every block; one count for every rank, or one per pipeline rank (nn::kAllBlocks for
  // a rank whose every block does).
  std::vector<int64_t> recompute_blocks;
  // The mode of a rank's other blocks where a count is given (train.recompute =
  // "full:3+selective"): empty, none; one for every rank, or one per pipeline rank, as
  // recompute_blocks.
  std::vector<nn::Recompute> recompute_rest;
  int64_t micro_batch = 1;  // rows per micro-batch on each dp rank
  int64_t grad_accum = 1;   // micro-batches per step (the pipeline's micro-batches under pp)
  std::string schedule;     // pp > 1 only
  // pp > 1: blocks per stage (parallel.pipeline_split, "3,4,4,2"); "": the runtime's balanced cut.
  std::string pipeline_split;
  // memory.* when the search offloads the layout (SearchRequest::offload_input): device_budget 0
  // means no offload.
  int64_t offload_device_budget = 0, offload_host_budget = 0, offload_chunk_bytes = 0;
  std::string offload_nvme_dir;
  bool offloaded() const { return offload_device_budget > 0; }
  // Pipeline rank `pp_rank`'s recomputation.
  nn::Recompute recompute_of(int pp_rank) const {
    return rank_recompute.empty() ? recompute : rank_recompute.at(size_t(pp_rank));
  }
  int64_t recompute_blocks_of(int pp_rank) const {
    if (recompute_blocks.empty()) return nn::kAllBlocks;
    return recompute_blocks.size() == 1 ? recompute_blocks[0]
                                        : recompute_blocks.at(size_t(pp_rank));
  }
  nn::Recompute recompute_rest_of(int pp_rank) const {
    if (recompute_rest.empty()) return nn::Recompute::None;
    return recompute_rest.size() == 1 ? recompute_rest[0] : recompute_rest.at(size_t(pp_rank));
  }
  // train.recompute's value: "selective", or per rank "full,selective,none"; "full:3" when a
  // count of blocks is given, "full:3+selective" with the other blocks' mode.
  std::string recompute_spec() const;
  // "dp=2 tp=1 pp=1 zero=1 recompute=none micro_batch=4 grad_accum=2" (" sp" after tp=N with
  // sequence parallelism, " tp_plan=FILE" after it with a plan file; " split=3,4" after the
  // schedule; " offload=D+H[+nvme]").
  std::string str() const;
  // The `tessel train` arguments that run it (the flags and --set overrides).
  std::vector<std::string> train_args() const;
};

// "" when the memory and step models predict `layout`; otherwise why not. The one place that
// widens as terms enter the models.
std::string model_coverage(const Layout& layout);

// The memory model's layout for a predicted one, as `tessel plan memory` makes it: tp rank 0 with
// the family's plan, and under pp > 1 pipeline rank `pp_rank`'s stages and schedule.
MemoryLayout memory_layout(const Layout& layout, const SearchRequest& request, int pp_rank = 0);

enum class PlanStatus { Ranked, OutOfMemory, NotModelled, Invalid };
std::string_view status_name(PlanStatus status);

struct PlanResult {
  Layout layout;
  PlanStatus status = PlanStatus::Invalid;
  std::string reason;  // why it is not ranked
  // Ranked and OutOfMemory: the predictions (the fullest rank's memory: under pp the pipeline
  // rank with the largest peak; its bucket list is dropped once the step is predicted).
  MemoryEstimate memory;
  StepTime time;
  double step_seconds = 0, tokens_per_second = 0, mfu = 0;
  // pp > 1: the stage boundaries of Alpa's DP over the traced layers' compute.
  StageSplit stages;
  // Offloaded (layout.offloaded()): the offload model's steady step of the rank with the most
  // NVMe time, that time at the [storage] rates (the step is the longer of it and the compute,
  // which `time` holds), and the memory the rank keeps outside the tiers.
  OffloadTraffic offload;
  double offload_io_seconds = 0;
  double offload_plain_bytes = 0;
  bool composed = false;           // pp > 1: every rank composed from its stages' traces
  std::vector<double> rank_peaks;  // pp > 1: each pipeline rank's peak bytes
};

struct SearchResult {
  std::string model;               // the model's summary line
  int devices = 0;                 // of the cluster the search ran on
  double device_memory_bytes = 0;  // per device
  int64_t global_batch = 0, seq = 0;
  std::vector<PlanResult> ranked;  // fastest first
  std::vector<PlanResult> pruned;  // out of memory, not modelled or invalid, in search order
  int traces = 0;                  // shape-only traces the search ran
  int stage_traces = 0;            // stages traced for composed pipelines (PlanResult::composed)
};

// Every layout of `config`'s step on `cluster` scaled to request.devices.
SearchResult search_plans(const models::ModelConfig& config, const Cluster& cluster,
                          const SearchRequest& request);

// One layout's prediction (status Ranked or OutOfMemory; NotModelled with the reason where the
// models do not cover it): what a run of that layout writes beside its measurements.
PlanResult predict_layout(const models::ModelConfig& config, const Cluster& cluster,
                          const SearchRequest& request, const Layout& layout);

// The fastest ranked plan; when none fits, one Error naming the least memory per rank any
// predicted layout needs (and that layout), or why no layout could be predicted.
const PlanResult& best_plan(const SearchResult& result);

// Each pipeline layer's cost for the stage DP: compute time of its traced ops (all phases),
// its parameters' state at `state_bytes_per_param`, the activations its modules save.
std::vector<LayerCost> traced_layer_costs(const Cluster& cluster, const Graph& graph,
                                          const models::CausalLM& model,
                                          double state_bytes_per_param);

}  // namespace tessel::plan
