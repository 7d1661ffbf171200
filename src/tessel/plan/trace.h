// SPDX-License-Identifier: Apache-2.0
// The shape-only trace of a training step (the planner's input, issue "planner" item 1): any
// model family's model is built on the meta device through the family interface, and its
// forward, cross-entropy loss and backward run through the real ops and autograd layers with the
// meta backend underneath, which reports every kernel with its FLOPs and bytes
// (kernels/meta/meta_backend.cpp has the counting rules). Module hooks tag each op with the module
// it runs in; autograd carries the tag into the backward. Nothing is allocated and nothing is
// computed, so the 175B-parameter shapes cost the same milliseconds as the tiny ones.
// What is counted and why: docs/PLANNER.md, "Trace".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/models/causal_lm.h"
#include "tessel/nn/autocast.h"
#include "tessel/nn/recompute.h"
#include "tessel/plan/graph.h"
#include "tessel/plan/pipeline_rank.h"

namespace tessel::plan {

// Data parallelism with ZeRO-2 or ZeRO-3 as the runtime runs it on one dp rank, set up on the model
// built on meta by a layer above the planner (cli/plan_layout.h: parallel::DataParallel and
// Zero3Parameters over a shape-only communicator of the dp ranks, in the state a step after the
// first finds them: gradient shards made, ZeRO-3's parameters released to their shards). The
// trace then drives it as the trainer does, so the full gradient buffers, the gathered units, the
// gather buffers and the 16-bit copies of gathered units live exactly as long as they would.
struct DataParallelRun {
  std::shared_ptr<void> state;  // keeps the runtime's objects (and their hooks) alive
  std::function<void(bool last)> before_backward;  // the last micro-batch of a step communicates
  std::function<void()> after_backward;            // ZeRO-3: no unit stays gathered
  std::function<void()> finish;                    // the step's gradient sync
  // Mixed precision: masters whose 16-bit copies wait for their unit's gather, and the scope
  // handed to ZeRO-3 (null: none) for as long as it lives.
  nn::LowPrecisionScope::Defer defer;
  std::function<void(nn::LowPrecisionScope*)> set_low_precision;
};
// Sets up data parallelism over `trained` (the parameters this rank trains, model order) of
// `model`, as built on meta (and transformed).
using DataParallelTransform = std::function<DataParallelRun(
    models::CausalLM& model, const std::vector<std::string>& trained)>;

struct TraceOptions {
  int64_t batch = 1;  // sequences per micro-batch
  int64_t seq = 0;    // tokens per sequence; 0: the model's max_positions
  nn::Recompute recompute = nn::Recompute::None;
  // `recompute` on the first N of the blocks the trace runs (the model's, a pipeline rank's, a
  // stage's; forward order) and recompute_rest on the others: train.recompute's `mode:N+rest`
  // (nn/recompute.h).
  int64_t recompute_blocks = nn::kAllBlocks;
  nn::Recompute recompute_rest = nn::Recompute::None;  // the other blocks' (`mode:N+rest`)
  // The layers' compute dtype: f32, or bf16 / f16 under autocast (nn::LowPrecisionScope; the
  // masters stay f32, as the trainer's --precision runs them).
  DType compute_dtype = DType::F32;
  bool dropout = true;  // train mode (the config's dropout); false traces eval-mode dropout
  // Gradients exist before the step (data parallelism's bucket buffers hold them between steps),
  // so the backward accumulates into them instead of allocating them: Graph::step_peak_bytes
  // then leaves them out.
  bool gradients_held = false;
  // The CPU backend runs most kernels on 16-bit tensors through f32 stand-ins of every 16-bit
  // operand and output (kernels/cpu/half_kernels.h), allocated for the kernel's duration; counted
  // in Graph::step_peak_bytes when set. GEMMs widen in f16 only (bf16 GEMMs run natively through
  // oneDNN on CPUs with AVX-512 BF16, the machines this models).
  bool half_stand_ins = true;
  // Attention costed as a runtime without a fused kernel runs it (unfused_attention.h): the
  // nodes' FLOPs and bytes, not the memory the trace measures.
  bool unfused_attention = false;
  // Bytes allocated when the backward's first parameter gradient is ready and held to its end:
  // the full gradient buffers data parallelism reduce-scatters (ZeRO-2), allocated at a bucket's
  // first gradient (all at once here: exact for one bucket). 0: none.
  double first_gradient_bytes = 0;
  // Applied to the model once it is built on meta, before anything runs: how a layer above the
  // planner changes it (tensor parallelism lives in parallel/; cli/plan_layout.h applies the
  // runtime's own plan). With it, `loss` replaces the model's cross-entropy of logits [B, T, V']
  // and targets [B, T] (the vocab-parallel one). Empty: the model as built.
  std::function<void(models::CausalLM&)> transform;
  std::function<Tensor(const Tensor& logits, const Tensor& targets)> loss;
  // Pipeline messages' sequence length (sequence parallelism sends this rank's piece); 0: seq.
  int64_t message_seq = 0;
  // ZeRO-2/3 by the runtime's own code (above); replaces gradients_held and first_gradient_bytes.
  DataParallelTransform data_parallel;
  // Micro-batches per step (without a pipeline): with more than one, a first micro-batch runs
  // before the traced one without communicating, as the trainer's accumulation does, so that the
  // traced one starts with the gradients (or data parallelism's buffers) the others filled (its
  // ops are not recorded: the graph stays one micro-batch).
  int64_t micro_batches = 1;
  // A pipeline rank (trace_pipeline_rank): its schedule and the axes' finish run this many times
  // in a row on the same model and data-parallel objects, whose state carries over from step to
  // step as in a run (ZeRO-3's prefetch follows the order the last forward ran its units); the
  // graph and its bytes are the last step's.
  int steps = 1;
};

// The block indices of pipeline layers [begin, end) of a model of `num_layers` blocks (layer
// l >= 1 is block l - 1), in order; and those of pipeline rank `rank`'s stages, stage by stage.
std::vector<int64_t> blocks_of_layers(int64_t num_layers, int64_t begin, int64_t end);
std::vector<int64_t> rank_blocks(const PipelineRank& rank, int64_t num_layers);

// Forward + loss + backward of one micro-batch of `config`'s model, as a graph.
Graph trace_training_step(const models::ModelConfig& config, const TraceOptions& options);

// One pipeline rank's step (pipeline_trace.cpp): its actions replayed in order over its stages,
// every micro-batch, with the executor's message buffers. Graph::parameter_* count what the rank
// holds; step_peak_bytes is the rank's peak over the whole schedule.
Graph trace_pipeline_rank(const models::ModelConfig& config, const TraceOptions& options,
                          const PipelineRank& rank);

// A pipeline rank's data parallelism over the parameters it trains: the runtime's own
// (options.data_parallel), or gradients made before the step (options.gradients_held), or none.
DataParallelRun start_data_parallel(models::CausalLM& model, const TraceOptions& options,
                                    const std::vector<std::string>& trained);

// One pipeline stage's forward as the executor runs it over the trainer's slices: the
// embedding of `ids` when the stage holds pipeline layer 0, else `input`; its blocks; with the
// head, the loss against `targets` (options.loss, else cross-entropy). Its backward: from
// `grad_output`, or from a seed of ones where the stage ends in the loss (grad_output undefined).
Tensor stage_forward(models::CausalLM& model, const TraceOptions& options, int64_t begin,
                     int64_t end, const Tensor& ids, const Tensor& targets, const Tensor& input);
void stage_backward(const Tensor& output, const Tensor& grad_output);

// The modules that hold parameters `names` directly ("h.0.attn.c_attn.weight" ->
// h.0.attn.c_attn), each once, in the order of their first parameter.
std::vector<nn::Module*> parameter_holders(nn::Module& root, const std::vector<std::string>& names);

// The parameters pipeline rank `rank` trains (its stages'), and with `with_tied` also those its
// head multiplies with although the first stage owns them (a tied embedding).
std::vector<std::string> pipeline_rank_parameters(const models::CausalLM& model,
                                                  const PipelineRank& rank, bool with_tied);

}  // namespace tessel::plan
