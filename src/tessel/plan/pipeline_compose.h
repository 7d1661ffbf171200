// SPDX-License-Identifier: Apache-2.0
// A pipeline rank's step composed from traces of its stages, for searches too large to trace
// every rank's whole schedule (a 175B GPT over 1,024 GPUs: up to 1,536 micro-batches a rank, for
// thousands of layouts). Each distinct stage (its first and last layer's kind and its number of
// layers: the embedding, blocks, the head) is traced once on the meta device for two
// micro-batches — two forwards, then two backwards, with the executor's message buffers — and
// what each action adds at its peak and leaves behind is read off the meta allocator; the rank's
// schedule (GPipe, 1F1B, interleaved 1F1B: the runtime's own action list) is then replayed over
// those figures with the executor's buffer lifetimes (receives posted one compute ahead, a send's
// payload retired after the next compute), in arithmetic. Compute, tensor-parallel collectives
// and FLOPs are the first micro-batch's plus the later ones' per micro-batch. How close it comes
// to the whole-schedule trace (plan/trace.h, trace_pipeline_rank): docs/PLANNER.md, "The search
// at scale".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tessel/plan/cluster.h"
#include "tessel/plan/compute_cost.h"
#include "tessel/plan/memory_model.h"

namespace tessel::plan {

// One stage's actions, each as bytes above what was live when it began.
struct ActionBytes {
  double peak = 0;   // the most live at once during it (the CPU's 16-bit stand-ins included)
  double delta = 0;  // what it leaves live
};

struct StageTrace {
  // One micro-batch through the stage: the first (the 16-bit copies of its weights and its
  // gradients made) and any later one.
  ComputeTime compute_first, compute_later;
  ComputeTime compute_start;  // the schedule's start: the autocast scope's 16-bit weight copies
  double tp_seconds_first = 0, tp_seconds_later = 0;  // its tensor-parallel collectives
  double flops_first = 0, flops_later = 0;            // forward + backward FLOPs
  // Forward: its output, autograd's saved tensors, first-use weight copies. Backward, after
  // the slot lets go of its output and its output's gradient: the input's gradient and the
  // parameters' gradients made.
  ActionBytes start, forward_first, forward_later, backward_first, backward_later;
  double output_bytes = 0;      // the forward's output (a message, or the loss)
  double input_grad_bytes = 0;  // the gradient of the stage's input (0 on the first stage)
  double released_at_end = 0;   // what the end of the schedule frees (the autocast scope's copies)
  ActionBytes finish;           // the axes' finish after the schedule (the gradient sync)
  double tied_bytes = 0;        // the first stage: the tied embedding the head's rank sends back
  double largest_unit_bytes = 0;  // its largest ZeRO-3 unit, whole (a block, or one parameter)
  // The parameters it trains (name, elements; model order): a rank's gradient buckets may span
  // its stages.
  std::vector<std::pair<std::string, int64_t>> trained;
  int64_t parameter_tensors = 0;
};

// Traces stages of one layout's ranks for `cluster` and keeps them by what changes a stage: the
// layout's micro-batch, recomputation, precision, tp, data-parallel gradients and ZeRO runtime,
// and the stage's layer range kind (embedding, head) and length. A returned reference stays valid
// while the object lives. Without a cluster (null) only the bytes are found.
class StageTraces {
 public:
  StageTraces(const Cluster* cluster, const models::ModelConfig& config);
  const StageTrace& get(const MemoryLayout& layout, int64_t begin, int64_t end);
  int count() const { return int(traces_.size()); }

 private:
  const Cluster* cluster_;
  const models::ModelConfig& config_;
  std::map<std::string, StageTrace> traces_;
};

// Pipeline layers [begin, end) of the model (0: the embedding, 1..L: the blocks, L + 1: the
// head) as one stage of pipeline rank `layout.pipeline`, traced for two micro-batches; its
// compute costed on `cluster` (null: none).
StageTrace trace_stage(const Cluster* cluster, const models::ModelConfig& config,
                       const MemoryLayout& layout, int64_t begin, int64_t end);

// A pipeline rank's whole schedule from its stages' traces: what the rank's whole-schedule trace
// gives the step and memory models.
struct ComposedRank {
  ComputeTime compute;
  double tp_seconds = 0;
  double flops = 0;    // forward + backward
  double message = 0;  // the largest message it sends between stages
  double step_peak_bytes = 0;
  int64_t parameter_tensors = 0;
};
ComposedRank compose_pipeline_rank(StageTraces& stages, const models::ModelConfig& config,
                                   const MemoryLayout& layout);

}  // namespace tessel::plan
