// SPDX-License-Identifier: Apache-2.0
// What the planner's memory and step models need from the layers above them (plan/ links models
// and sharding only): a pipeline rank's stages and action list made by the runtime's own
// partition (train/pipeline_stage.h) and schedule generators (parallel/pipeline), and tensor
// parallelism applied by the runtime's own plan (train/model_tensor_parallel.h) to the model the
// planner builds on the meta device, over a shape-only communicator. `tessel plan memory` uses
// them; so can any command that plans a (dp, tp, pp) layout.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tessel/models/causal_lm.h"
#include "tessel/parallel/zero/zero3.h"
#include "tessel/plan/memory_model.h"
#include "tessel/plan/offload_model.h"
#include "tessel/plan/step_cost.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tessel::cli {

// Pipeline rank `rank` of `pp` running `schedule` ("gpipe", "1f1b", "interleaved[:V]") over
// `microbatches`, the stages cut as the trainer cuts them: by `split` (parallel.pipeline_split,
// blocks per stage) or, when empty, balanced (train::pipeline_partition). `tp_transform`: the
// balanced cut weighs the layers as tp's pieces (the trainer cuts the model its tensor axis has
// already split: an MoE layer's experts stay whole under tp, so their layers weigh more than
// whole-model costs say). A model without experts is cut where its whole model is (every layer's
// cost scales alike under tp), so the transform is not applied to it.
plan::PipelineRank pipeline_rank(const models::ModelConfig& config, const std::string& schedule,
                                 int pp, int microbatches, int rank, const std::string& split = "",
                                 const std::function<void(models::CausalLM&)>& tp_transform = {});

// `--attention fused|unfused` on `cmd` into `attention` (plan/unfused_attention.h): how `plan
// memory` and `plan search` cost attention.
void add_attention_option(CLI::App* cmd, std::string& attention);

// Sets layout.tp and the transform and loss of tensor-parallel rank `tp_rank` of `tp`, with the
// family's built-in plan or the plan JSON at `plan_path`, and sequence parallelism when `sp`
// over rows of `seq` tokens (required with sp: a pipeline's messages carry the rank's piece of
// them, and stages after the first, which run no embedding, take the length from here as the
// trainer sets it). `etp`: each MoE expert's FFN split over tp as well, as the trainer's --etp
// splits it after the plan (train/strategy/tensor_parallel_strategy.h).
void set_tensor_parallel(plan::MemoryLayout& layout, int tp, int tp_rank,
                         const std::string& plan_path, bool sp, int64_t seq = 0, bool etp = false);

// Whether that rank's tensor parallelism sums gradients (sequence parallelism's whole parameters,
// replicated K/V pieces), which the trainer then keeps its dp buckets in plain memory for and
// reduces after (train/trainer_strategies.cpp).
bool tp_sums_gradients(const models::ModelConfig& config, int tp, int tp_rank,
                       const std::string& plan_path, bool sp);

// Sets layout.dp_transform for ZeRO-2 and ZeRO-3 over layout.dp ranks (stage and bucket size from
// the layout; nothing for dp 1 or ZeRO-0/1, which the memory model counts by formula): the
// runtime's DataParallel and Zero3Parameters (units as the trainer makes them, under pp those
// of the rank's stages) on the model built on meta, over a shape-only dp communicator.
void set_data_parallel(plan::MemoryLayout& layout);

// The ZeRO-3 units of a rank training `trained` of `model` as the trainer forms them; `stages`:
// a pipeline rank (the embeddings' units hooked on their own modules, not the root).
std::vector<parallel::Zero3Unit> zero3_rank_units(models::CausalLM& model,
                                                  const std::vector<std::string>& trained,
                                                  bool stages);

// The holds a pipeline rank under dp (layout.pipeline, layout.dp, ZeRO-1/2/3) takes of its
// bucket tensors in `steps` steps from the first (plan::OffloadInput::recorded_holds): the
// runtime's DataParallel and Zero3Parameters, set up as the trainer sets them up under memory
// offload (buffers and shards laid out by the caller), run the rank's schedule, the tied
// embedding's gradient and the gradient sync on the meta device with a hold that records
// (cli/offload_record.cpp). Under mixed precision at ZeRO-1/2 the offload layer's unit hooks
// (train/strategy/unit_hooks.h) record each unit's copies' holds among them; `units`: the model's
// units (plan::offload_input's), which the recorded ones must match.
// With `ep` > 1 the rank's stages' experts over dp / ep beside them, as record_ep_holds.
// `tp_sums`: tp sums gradients (tp_sums_gradients), so ZeRO-2/3's dense reductions wait for it.
std::vector<std::vector<plan::ShardHoldEvent>> record_pipeline_holds(
    const models::ModelConfig& config, const plan::MemoryLayout& layout, int steps,
    const std::vector<plan::OffloadUnit>& units, int ep = 1, bool tp_sums = false);

// Expert parallelism on `model` built on meta, as rank 0 of `ep` holds it: the runtime's split
// of every MoE layer's experts, with a stand-in for the all-to-all that runs this rank's experts
// on the rows routed to them (cli/expert_meta.cpp). Returns the parameters holding its experts.
std::vector<std::string> split_experts_on_meta(models::CausalLM& model, int ep);
// The model transform of rank 0 of `ep` in `layout`: its tensor-parallel rank's pieces
// (layout.tp_transform, as the trainer's tensor axis comes first), then split_experts_on_meta;
// the experts' parameters go into `experts`.
std::function<void(models::CausalLM&)> expert_rank_transform(
    const plan::MemoryLayout& layout, int ep, std::shared_ptr<std::set<std::string>> experts);
// Tokens enough for the meta routing to reach every expert of every MoE layer of `model`; under
// the layout's sequence parallelism (message_seq > 0) each tp rank routes its own piece of them,
// so tp times as many.
int64_t tokens_for_every_expert(models::CausalLM& model, const plan::MemoryLayout& layout);

// The holds an expert-parallel rank (ep dividing layout.dp, ZeRO-1/2/3, no pp; under tp its
// pieces, layout.tp_transform, and its loss; not where tp sums gradients) takes of its bucket
// tensors in `steps` steps from the first: the dense axis's DataParallel and
// Zero3Parameters over dp and the experts' own over dp / ep, set up as the trainer sets them up
// under memory offload, run through the trainer's micro-batches (layout.grad_accum) and gradient
// sync with the experts' 1/ep scaling, on the meta device (cli/offload_record.cpp). `units` as for
// record_pipeline_holds; so is `tp_sums`.
std::vector<std::vector<plan::ShardHoldEvent>> record_ep_holds(
    const models::ModelConfig& config, const plan::MemoryLayout& layout, int ep, int steps,
    const std::vector<plan::OffloadUnit>& units, bool tp_sums = false);

// The offload model's input for one rank of `layout` under `budgets`: its tensor-parallel rank's
// pieces (layout.tp_transform), its data-parallel rank's ZeRO shards and buckets (layout.dp,
// zero_stage, bucket_bytes; under ZeRO-1/2 the gradient order the model's backward makes), its
// pipeline rank's stages (layout.pipeline). `tp_sums`: that tensor parallelism sums gradients
// (tp_sums_gradients), which under dp keeps the buckets in plain memory; `clipped`: the steps
// scale their gradient shards (clipping that triggers; fp16 always does); `ep` > 1: rank 0 of
// expert parallelism over ep (its experts' shards after the dense ones, the holds recorded).
// What `tessel plan offload` and the plan search's offloaded layouts predict.
plan::OffloadInput offload_input_for(const models::ModelConfig& config,
                                     const plan::MemoryLayout& layout,
                                     const plan::OffloadBudgets& budgets, bool tp_sums,
                                     bool clipped, int ep = 1);

// "bf16" / "fp16" (the trainer's train.precision): the compute dtype over f32 masters; else f32.
DType precision_dtype(const std::string& precision);

// Every pipeline rank of `layout` traced and its memory estimated (rank r with the pipeline of
// `schedule` over `pp` ranks and layout.grad_accum micro-batches, and its entry of `recompute`
// when given: train.recompute, one entry or one per rank); with pp 1, the layout itself.
struct RankTraces {
  std::vector<plan::Graph> graphs;
  std::vector<plan::MemoryEstimate> memory;
};
RankTraces trace_ranks(const models::ModelConfig& config, const plan::MemoryLayout& layout,
                       const std::string& schedule, int pp, const std::string& split = "",
                       const std::string& recompute = "");
// Rank r's entry of train.recompute `spec` (one, or one per rank of pp) in `layout`.
void set_rank_recompute(plan::MemoryLayout& layout, const std::string& spec, int r, int pp);

// The step time of `layout` on `cluster`: the pipeline schedule's over every rank's trace, or
// with pp 1 the one rank's step.
plan::StepTime predict_step_time(const plan::Cluster& cluster, const models::ModelConfig& config,
                                 const plan::MemoryLayout& layout, const std::string& schedule,
                                 int pp, const RankTraces& traced, const std::string& split = "");

}  // namespace tessel::cli
