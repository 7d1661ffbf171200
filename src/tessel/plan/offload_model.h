// SPDX-License-Identifier: Apache-2.0
// The planner's model of memory offload (docs/PLANNER.md, "Offload"): where one rank's training
// state lives and what each step moves between the device, host and NVMe tiers, predicted without
// running anything. It lays the state out in chunks as the memory layer does (PatrickStar's
// chunks: one list per kind, tensors in the order the step first uses them), writes down the
// chunk accesses the trainer's offload hooks and the CPU AdamW make in one step (each unit's
// chunks around its forward and its backward, the norm's and the update's rows in the host
// tier, the gradients freed after the update; a pipeline rank's units in its schedule's order;
// under dp the gathers' (ZeRO-3), the reductions' and the update's holds of each rank's
// shards: offload_steps.h; a pipeline rank under dp's schedule holds as recorded from the runtime's
// own objects), and replays them against the tiers' budgets with the runtime's
// eviction rules: LRU in the first step, Belady's MIN over the recorded step from then on, a
// device victim to the host tier when it has room and to NVMe otherwise, a clean victim preferred
// among equals. The result is docs/MEMORY.md's per-step
// traffic, in the same names `tessel train` writes to train.jsonl, so a run's figures sit beside
// the prediction.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/models/causal_lm.h"
#include "tessel/plan/pipeline_rank.h"

namespace tessel::plan {

// memory.* of the training configuration, in bytes.
struct OffloadBudgets {
  int64_t chunk_bytes = int64_t(64) << 20;  // rounded up to 4 KiB, as the runtime does
  int64_t device_budget = 0;
  int64_t host_budget = 0;
  bool nvme = false;  // memory.nvme_dir set
  // memory.nvme_budget: 0 reserves a swap-file slot for every chunk; fewer slots than chunks are
  // taken back from chunks in memory when an eviction needs one (their clean copies lost).
  int64_t nvme_budget = 0;
};

// One trained parameter (f32 master), in the optimizer's order.
struct OffloadTensor {
  std::string name;
  int64_t numel = 0;
  bool copy = false;  // mixed precision: it has a 16-bit compute copy
  // Expert parallelism: the MoE layer (0, 1, ... in model order) whose local experts it holds;
  // -1: a dense parameter.
  int expert_layer = -1;
};

// Parameters held together around a module's forward and backward (the trainer's units: one per
// embedding-level parameter on the root, then each block and the final norm, in forward order).
struct OffloadUnit {
  std::string name;
  bool root = false;            // its hooks are the root module's: held through the whole pass
  std::vector<size_t> tensors;  // into OffloadInput::tensors
  int stage = 0;                // under a pipeline: the stage it belongs to
};

// A hold that a ZeRO rank's DataParallel or Zero3Parameters takes of one of its bucket's tensors
// in chunks (parallel::ShardHold), its end, or a full buffer's discard: in the tiers' terms, a
// gather reads in the device tier, backward's accumulation writes there; a reduction writes and
// the norm reads in the host tier.
struct ShardHoldEvent {
  enum Kind : uint8_t { Hold, Release, Discard };
  // The ZeRO-3 parameter shard; the bucket's buffer backward writes (ZeRO-2/3's full buffer,
  // ZeRO-1's all-reduced one); ZeRO-2/3's gradient shard; under mixed precision at ZeRO-1/2, a
  // unit's 16-bit copies of its replicas (held over its forward and its backward, the offload
  // layer's unit spans: train/strategy/unit_hooks.h).
  enum Part : uint8_t { Param, Buffer, GradShard, Copies };
  Kind kind = Hold;
  Part part = Param;
  int64_t bucket = 0;  // DataParallel's bucket index; for Copies the unit's (OffloadInput::units)
  bool device = false, write = false;
  bool expert = false;  // the experts' own buckets (OffloadInput::ep), not the dense ones
  bool operator==(const ShardHoldEvent&) const = default;
};

struct OffloadInput {
  std::vector<OffloadTensor> tensors;
  std::vector<OffloadUnit> units;
  DType compute = DType::F32;  // bf16 / f16: the copies' dtype
  int64_t micro_batches = 1;   // forwards and backwards per step
  OffloadBudgets budgets;
  // Data parallelism: each rank offloads its own ZeRO shards: at ZeRO-3 one bucket per unit; at
  // ZeRO-1/2 DataParallel's buckets of `bucket_bytes` (parallel.bucket_mb) over the parameters in
  // reverse order, filled as one backward makes the gradients ready (`grad_order`: indices into
  // tensors, in the order their grad-ready hooks fire; gradient_ready_order() records it; not
  // needed with recorded_holds).
  int dp = 1;
  int zero_stage = 0;
  int64_t bucket_bytes = int64_t(25) << 20;
  std::vector<size_t> grad_order;
  // dp x tp where tp sums gradients (sequence parallelism's whole parameters, replicated K/V
  // pieces): the buckets' buffers stay plain memory and every reduction launches after backward,
  // once tp's sums are done (no overlap).
  bool tp_sums = false;
  // Under dp: the step scales its gradient shards in a pass of its own (clipping that triggers,
  // an fp16 loss scale; 1/micro-batches always does). One process scales inside the update.
  bool scaled = false;
  // Pipeline parallelism: this rank's stages and schedule (its micro-batches are the actions'),
  // and the tensors of a tied embedding whose weight the last stage's head reads (the first
  // stage's rank: it receives their gradient and sends their update).
  PipelineRank pipeline;
  std::vector<size_t> tied;
  // A pipeline rank under dp (and an expert-parallel rank, below): the holds the runtime's own
  // DataParallel and Zero3Parameters take of this rank's bucket tensors over the schedule, the tied
  // embedding's gradient and the gradient sync, step by step from the first (ZeRO-3's prefetch
  // follows the order the last forward ran the units, across micro-batches and steps, so the first
  // step differs), recorded on the meta device by a layer that links them (cli/offload_record.h)
  // with the buffers in chunks; later steps repeat the last. The norm, the update and the frees
  // follow as without a pipeline.
  std::vector<std::vector<ShardHoldEvent>> recorded_holds;
  // Expert parallelism (--ep, dividing dp): this rank holds 1/ep of every MoE layer's experts
  // (the tensors with an expert_layer), partitioned over the dp / ep ranks holding the same
  // experts in buckets of their own, laid out after the dense rows: ZeRO-3 one unit per MoE
  // layer (parameter, gradient and moments' shards), ZeRO-1/2 buckets of bucket_bytes (their
  // moments' shards; stage 2's gradient shards); their full and ZeRO-1's all-reduced buffers
  // stay plain memory, as do the dense ones at ZeRO-2/3 (train/trainer_strategies.cpp). The
  // step's holds (both axes' gathers and reductions, the experts' 1/ep scaling, the copies'
  // spans) are recorded (recorded_holds); the norm, the scaling, the update and the frees take
  // the dense shards, then the experts'.
  int ep = 1;
};

// One chunk list ("param16", "param", "grad", "adam_m", "adam_v") and where its chunks are at
// start (seal: device first, then host, then NVMe, in chunk order).
struct OffloadGroup {
  std::string name;
  int chunks = 0;
  int device = 0, host = 0, nvme = 0;
};

// One step's traffic, as train.jsonl's offload_* fields count it.
struct OffloadTraffic {
  int64_t nvme_read_bytes = 0;
  int64_t nvme_write_bytes = 0;
  int64_t h2d_bytes = 0;  // between the memory tiers
  int64_t d2h_bytes = 0;
  int64_t evictions = 0;  // chunks sent to NVMe, of them `clean_evictions` without a write
  int64_t clean_evictions = 0;
  bool operator==(const OffloadTraffic&) const = default;
};

struct OffloadPrediction {
  int64_t chunk_bytes = 0;
  int chunks = 0;
  std::vector<OffloadGroup> groups;
  int64_t state_bytes = 0;     // the tensors' bytes (without the chunks' padding)
  int device_working_set = 0;  // the most chunks one step holds in the device tier at once
  int64_t nvme_file_bytes = 0;
  int64_t start_nvme_write_bytes = 0;  // what start-up writes to NVMe
  // Steps 1.. as simulated: step 1 evicts by LRU while it is recorded, later ones by MIN.
  std::vector<OffloadTraffic> steps;
  const OffloadTraffic& steady() const { return steps.back(); }
};

// Lays out, checks the budgets as the trainer does at start (one Error naming the smallest
// device or host budget that works) and simulates `steps` steps (at least 2).
OffloadPrediction predict_offload(const OffloadInput& input, int steps = 4);

// The units and parameters of `config`'s model as the trainer offloads them on one process (built
// on the meta device; under mixed precision the parameters a precision scope over the model
// gives 16-bit copies). `transform` is applied to the model first: a tensor-parallel rank's
// (MemoryLayout::tp_transform), whose pieces the rank offloads as one process does.
// With an active `pipeline`, the units and parameters of that pipeline rank's stages (each unit
// held around its own modules, as a stage runs them).
OffloadInput offload_input(const models::ModelConfig& config, DType compute,
                           const OffloadBudgets& budgets, int64_t micro_batches,
                           const std::function<void(models::CausalLM&)>& transform = {},
                           const PipelineRank& pipeline = {});

// The order in which one training backward of `config`'s model (built on the meta device, one
// row of two tokens) makes the gradients of `in.tensors` ready: the order DataParallel's hooks
// see them, which sets when each ZeRO-1/2 bucket is complete. Under a 16-bit `in.compute` the
// masters' copies are cast as each of `in.units` starts its forward, as the offloaded run
// makes them.
// `transform` and `loss` as for offload_input() and TraceOptions: a tensor-parallel rank's model
// and its vocab-parallel loss.
std::vector<size_t> gradient_ready_order(
    const models::ModelConfig& config, const OffloadInput& in,
    const std::function<void(models::CausalLM&)>& transform = {},
    const std::function<Tensor(const Tensor& logits, const Tensor& targets)>& loss = {});

// Seconds the disk is busy with one step's NVMe transfers at its sequential read and write
// bandwidths (bytes/s): reads and writes share the one device, so their times add (the quiet
// GPT-2 xl runs of docs/BENCHMARKS.md moved 1.8-1.9 GB/s together, what this gives with the
// disk's own rates). A step that overlaps its compute with them can be no shorter.
double offload_io_seconds(const OffloadTraffic& traffic, double read_bandwidth,
                          double write_bandwidth);

}  // namespace tessel::plan
