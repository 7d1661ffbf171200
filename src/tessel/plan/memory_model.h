// SPDX-License-Identifier: Apache-2.0
// The planner's memory model: the bytes one rank holds at its peak for a training layout, term by
// term. Model state follows ZeRO (Rajbhandari et al., SC 2020) with the runtime's own partitioning
// rules (gradient buckets in reverse model order under a byte cap, each padded to a multiple of the
// dp size once it is reduce-scattered, Adam moments on each rank's block, the all-gather staging
// buffer); the step's activations and temporaries come from the shape-only trace (plan/trace.h),
// which counts every tensor the step's kernels would allocate, so recomputation, autocast and the
// fused kernels' choices are the runtime's own; tensor parallelism (Megatron-LM's splits, as the
// runtime's plan applies them) and pipelines (each rank's stages and in-flight micro-batches, by
// replaying its schedule: GPipe, 1F1B, interleaved) are traced the same way. Korthikanti et al.
// 2022's per-layer count of saved activations is reported beside it. What each term is and how it
// was checked: docs/PLANNER.md, "Memory model".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/models/causal_lm.h"
#include "tessel/nn/recompute.h"
#include "tessel/plan/graph.h"
#include "tessel/plan/pipeline_rank.h"
#include "tessel/plan/trace.h"

namespace tessel::plan {

struct MemoryLayout {
  int dp = 1;
  int zero_stage = 0;       // 0..3 over the dp ranks
  int64_t micro_batch = 1;  // rows per micro-batch on each dp rank
  int64_t seq = 0;          // tokens per row; 0: the model's context
  int64_t grad_accum = 1;   // micro-batches per step
  nn::Recompute recompute = nn::Recompute::None;
  // `recompute` on the first N of the rank's blocks only (train.recompute's `mode:N`; under a
  // pipeline the rank's blocks in forward order); nn::kAllBlocks: on every block.
  int64_t recompute_blocks = nn::kAllBlocks;
  // The mode of the rank's other blocks under `mode:N+rest` (read only with a count).
  nn::Recompute recompute_rest = nn::Recompute::None;
  DType compute_dtype = DType::F32;          // f32, or bf16 / f16 autocast over f32 master weights
  int64_t bucket_bytes = int64_t(25) << 20;  // gradient bucket cap (parallel.bucket_mb)
  // Tensor parallelism: the runtime's transform of the model and its vocab-parallel loss, which
  // the planner's layer cannot build (parallel/ is above it); cli/plan_layout.h supplies them.
  // Parameters, gradients and moments are then this rank's pieces, activations those the plan
  // leaves on the rank.
  int tp = 1;
  std::string tp_plan;  // the plan file the transform applies ("": the family's built-in plan)
  std::function<void(models::CausalLM&)> tp_transform;
  std::function<Tensor(const Tensor& logits, const Tensor& targets)> tp_loss;
  // Under sequence parallelism: the tokens of a pipeline message (this tp rank's piece of the
  // sequence); 0: the whole sequence.
  int64_t message_seq = 0;
  // Pipeline parallelism: this rank's stages and schedule (pipeline_rank.h; grad_accum is then
  // its micro-batches). Inactive (ranks 1) by default.
  PipelineRank pipeline;
  // ZeRO-2 and ZeRO-3 over dp > 1 by the runtime's own DataParallel and Zero3Parameters on meta
  // (trace.h; cli/plan_layout.h supplies it): the step's full gradient buffers, gathered units and
  // gather buffers are then traced, not estimated. Required for ZeRO-3 with a pipeline.
  DataParallelTransform dp_transform;
  // The gradients live outside the step (memory offload's chunks, as dp's buckets hold them under
  // dp > 1): the trace counts the step's activations and temporaries, not fresh gradients.
  bool gradients_held = false;
  // Attention costed as unfused kernels (unfused_attention.h, TraceOptions::unfused_attention).
  bool unfused_attention = false;
  // The data-parallel gradient reductions overlap the backward, bucket by bucket, as tessel's
  // runtime runs them; false: they all start once the backward has ended, as Megatron-LM's local
  // DDP ran them until its --overlap-grad-reduce (2023), the runtime of the published Megatron
  // rows (time only).
  bool overlap_grad_reduce = true;
};

// One gradient bucket as the runtime builds it (parameters in reverse model order).
struct BucketPlan {
  std::vector<std::string> params;
  int64_t numel = 0, padded = 0;  // padded: rounded up to a multiple of dp
};

// Bytes of one rank. "state" terms are held between steps; "step" terms are the step's own peak
// above them (what `tessel train` reports as step_peak_bytes); peak() is their sum (the
// allocator's peak, mem_peak_bytes).
struct MemoryEstimate {
  int64_t parameter_count = 0;
  // Held between steps.
  double param_bytes = 0;      // f32 master weights (ZeRO-3: this rank's blocks)
  double grad_bytes = 0;       // gradient buffers kept between steps (dp buckets or shards)
  double optimizer_bytes = 0;  // Adam's two moments (ZeRO >= 1: this rank's blocks)
  double comm_bytes = 0;       // ZeRO's all-gather staging buffer
  // The step.
  double traced_step_bytes = 0;      // the trace's peak: activations, temporaries, fresh gradients
  double gradient_buffer_bytes = 0;  // ZeRO-3: full bucket buffers alive during backward
  // ZeRO-2: the full bucket buffers, allocated in the trace at the first gradient (so inside
  // traced_step_bytes, not added again).
  double traced_gradient_buffer_bytes = 0;
  double gathered_bytes = 0;  // ZeRO-3: parameters gathered at once
  // For the report: what autograd keeps per micro-batch, and Korthikanti et al.'s count.
  double saved_activation_bytes = 0;
  double korthikanti_bytes = 0;
  std::vector<BucketPlan> buckets;

  double state() const { return param_bytes + grad_bytes + optimizer_bytes + comm_bytes; }
  double step() const { return traced_step_bytes + gradient_buffer_bytes + gathered_bytes; }
  double peak() const { return state() + step(); }
};

// The buckets of `params` (name, elements; model order) over `dp` ranks, as DataParallel makes
// them: reverse order, a new bucket when the next parameter would pass `bucket_bytes` (a larger
// parameter gets one of its own), padded to a multiple of dp when `padded` (reduce-scatter).
std::vector<BucketPlan> plan_buckets(const std::vector<std::pair<std::string, int64_t>>& params,
                                     int dp, int64_t bucket_bytes, bool padded);

// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
// bytes saved per transformer layer with 16-bit activations: s·b·h·(34 + 5·a·s/h) without
// recomputation, s·b·h·34 with selective recomputation, 2·s·b·h with full; divided by t under
// tensor parallelism with sequence parallelism (t = 1 here).
double korthikanti_layer_bytes(int64_t s, int64_t b, int64_t h, int64_t a, nn::Recompute mode);

// The terms held between steps and ZeRO's buffers, without the trace (traced_step_bytes 0;
// gradient_buffer_bytes: ZeRO-2/3's full buffers).
MemoryEstimate estimate_state(const models::ModelConfig& config, const MemoryLayout& layout);

// The trace's options for one rank of `layout`.
TraceOptions trace_options(const models::ModelConfig& config, const MemoryLayout& layout);

// The trace of one micro-batch on one rank of `layout` (the step cost reads the same graph).
Graph trace_for_layout(const models::ModelConfig& config, const MemoryLayout& layout);

// Data parallelism and ZeRO over one model replica per rank; `graph` is trace_for_layout's.
MemoryEstimate estimate_memory(const models::ModelConfig& config, const MemoryLayout& layout,
                               const Graph& graph);
MemoryEstimate estimate_memory(const models::ModelConfig& config, const MemoryLayout& layout);
// The same from a step's peak above the state (Graph::step_peak_bytes) and saved bytes, however
// they were found (plan/pipeline_compose.h composes a pipeline rank's).
MemoryEstimate estimate_memory(const models::ModelConfig& config, const MemoryLayout& layout,
                               double step_peak_bytes, double saved_bytes);
// The same over state terms already found (estimate_state of the same layout).
MemoryEstimate with_step(const models::ModelConfig& config, const MemoryLayout& layout,
                         MemoryEstimate state, double step_peak_bytes, double saved_bytes);

}  // namespace tessel::plan
