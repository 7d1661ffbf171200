// SPDX-License-Identifier: Apache-2.0
// The offload axis of the trainer (ZeRO-Offload / ZeRO-Infinity's tiers, PatrickStar's chunks):
// parameters, gradients and AdamW moments laid out in chunks in the order the step first uses
// them (the model's units: embeddings, blocks, final norm), each tensor a view into its chunk
// (Storage::rebind), moved between the device, host and NVMe tiers by a ChunkManager. A unit's
// parameter chunks are held in the device tier around its forward, and with its gradient chunks
// around its backward (module hooks and an identity node at the unit's output, as ZeRO-3
// gathers); the optimizer (OffloadAdamW) works in the host tier. The first step records every
// chunk access; later steps evict by Belady's MIN over that trace and read ahead along it.
// Mixed precision keeps the 16-bit compute copies in chunks of their own ("param16", as
// PatrickStar keeps its fp16 parameter chunks): the update rounds each master into its copy, and
// forward and backward read the copies' chunks instead of the f32 masters' (offload_copies.cpp).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/memory/chunk_manager.h"
#include "tessel/nn/autocast.h"
#include "tessel/nn/module.h"
#include "tessel/parallel/zero/zero3.h"
#include "tessel/tensor/host_memory.h"
#include "tessel/train/optim/offload_adamw.h"
#include "tessel/train/strategy/axis_strategy.h"
#include "tessel/train/strategy/unit_hooks.h"

namespace tessel::train {

// The chunk list of the 16-bit compute copies under mixed precision.
inline constexpr const char* kCopyGroup = "param16";
// The gradients' chunk list: the only chunks a backward writes.
inline constexpr const char* kGradGroup = "grad";
// Under dp at ZeRO-2/3: the buckets' full gradient buffers each reduce_scatter reads.
inline constexpr const char* kBucketGroup = "grad_bucket";

struct OffloadSetup {
  memory::MemoryConfig memory;
  int prefetch = 8;                        // accesses read ahead along the trace
  NamedTensors params;                     // the trainer's parameters, in its order
  std::vector<parallel::Zero3Unit> units;  // in forward order; every parameter in one
  // Writes a parameter's first values into `dst`, its place in its chunk (zeros on entry), so
  // start-up streams: the parameters are built shape-only and each is computed where it lives,
  // chunk by chunk within the budgets, never as a whole plain copy. Empty: the parameters'
  // own values are copied.
  std::function<void(const std::string& name, const Tensor& dst)> init;
  // Mixed precision: the compute dtype (bf16 or f16; f32: none) and the modules its scope covers
  // (nn::LowPrecisionScope::masters names the parameters that get 16-bit copies).
  DType compute = DType::F32;
  std::vector<nn::Module*> low_precision_roots;
  // Pipeline stages under mixed precision: one set of copies serves every micro-batch of the step
  // (pipeline_strategy.cpp), so the casts' backwards, and with them a unit's gradients, complete
  // only in the step's last backward; until then every unit's copies and gradients stay held,
  // and the device tier must hold them all.
  bool copies_span_step = false;
};

// `like`'s shape over `bytes` (not owned): a tensor's place in a chunk being filled.
Tensor view_of(const Tensor& like, void* bytes);

// Data parallelism with ZeRO (docs/MEMORY.md, "With data parallelism"): this rank's shards of
// one bucket, registered in the order the step first uses them.
struct OffloadShard {
  std::string name;  // the bucket's unit (stage 3) or "bucket <i>", for the placement lines
  int64_t bucket = -1;
  Tensor param;  // stage 3: the parameter shard; undefined below (the replicas stay in memory)
  // Stages 2 and 3: this rank's shard of the bucket's averaged gradients (DataParallel's, written
  // by its reduce_scatter); stage 1: the bucket's whole all-reduced buffer (written by backward
  // and the all_reduce in the device tier, read by the norm and the update in the host tier).
  Tensor grad;
  // Stages 2 and 3: the bucket's full (padded) gradient buffer, written by backward and read by
  // the reduce_scatter in the device tier, dead once the reduction is retired; undefined when the
  // buffers stay DataParallel's own (a bucket larger than a chunk).
  Tensor full;
  Tensor exp_avg, exp_avg_sq;
  // The ZeRO-3 parameter shards this shard's gathers belong to: 0 the dense units', 1 the
  // experts' (their own Zero3Parameters, which gather ahead on their own), so each group's
  // gathers count in the device tier's working set.
  int gathers = 0;
  // Stage 3, start-up streams: fills this shard's parameter shard (`dst`, its place in a chunk)
  // in place of the setup's init_param, for shards of another bucket list (the experts').
  std::function<void(const Tensor& dst)> init_param;
};

struct OffloadShardSetup {
  memory::MemoryConfig memory;
  int prefetch = 8;
  int zero_stage = 3;
  std::vector<OffloadShard> shards;
  // Stage 3, start-up streams: computes (or reads) bucket `bucket`'s parameter shard straight
  // into `dst`, its place in a chunk being sealed (zeros before). Unset: the shards start as
  // zeros (a checkpoint's load fills them, one chunk at a time).
  std::function<void(int64_t bucket, const Tensor& dst)> init_param;
  // Stages 1 and 2 under mixed precision: the replicated parameters (plain memory by design,
  // filled before this is built), the units they belong to in forward order, the compute dtype
  // and the modules its scope covers. Their 16-bit copies go into param16 chunks unit by unit
  // and units hold them as on one process (offload_copies.cpp). compute F32: no copies.
  NamedTensors replicas;
  std::vector<parallel::Zero3Unit> units;
  DType compute = DType::F32;
  std::vector<nn::Module*> low_precision_roots;
  // Pipeline stages: as OffloadSetup::copies_span_step, for the replicas' copies.
  bool copies_span_step = false;
};

class OffloadStrategy : public AxisStrategy, private UnitHooks::Listener {
 public:
  // Lays the states out (a chunk list per kind) and checks the budgets against one step's
  // working set: one clear Error naming the smallest budget that works, before any step. The
  // gradients and moments are shape-only until they start as zeros in their chunks.
  explicit OffloadStrategy(OffloadSetup setup);
  // Under data parallelism: only this rank's shards go into chunks; ZeRO's own code works on
  // them, holding each through shard_hold() while it reads or writes it (offload_shards.cpp).
  explicit OffloadStrategy(OffloadShardSetup setup);
  ~OffloadStrategy() override;  // removes its hooks
  OffloadStrategy(const OffloadStrategy&) = delete;
  OffloadStrategy& operator=(const OffloadStrategy&) = delete;

  std::string name() const override { return "memory offload"; }
  void begin_step() override;
  void after_backward() override;  // ends the accesses of units whose gradients never came
  void after_update() override;    // drops the gradients; the first step's trace goes to use
  void record(StepRecord& record) override;  // per-tier traffic, and the accounting check
  // The copies the precision scope uses (PrecisionStrategy::set_kept_copies): a master's 16-bit
  // chunk view, undefined for a tensor without one. Valid while the chunks' tensors are.
  nn::LowPrecisionScope::Kept kept_copies() const;
  // A micro-batch's precision scope (null: none), built with the kept copies deferred: while it
  // is set, a unit holds its copies' chunks instead of its masters' and takes its copies from
  // the scope as its forward starts (an evaluation without it reads the f32 masters, as in
  // memory).
  void set_low_precision(nn::LowPrecisionScope* scope) { low_ = scope; }
  // Rounds every master into its 16-bit copy, a chunk of each at a time in the host tier (after
  // the masters were written other than by the update: start-up, a checkpoint's load; under
  // ZeRO-1/2 after every update too, `scheduled` then: part of the traced step).
  void refresh_copies(bool scheduled = false);
  bool has_copies() const { return has_copies_; }

  memory::ChunkManager& chunks() { return *chunks_; }
  std::vector<OffloadedParameter> parameters() const { return states_; }
  void set_optimizer(OffloadAdamW* optimizer) { optimizer_ = optimizer; }
  // Under data parallelism: what ZeRO holds its shards through (ZeRO-3's gathers in the device
  // tier, the update and loads in the host tier). The handles it returns may outlive this object.
  parallel::ShardHold shard_hold();
  // The same for the gradient norm and scaling (train/optim/grad_norm.h): holds a span's flat
  // tensor in the host tier when it is a gradient shard in a chunk, nothing otherwise.
  SpanHold gradient_hold();
  // DataParallel's: shard_hold() and, for ShardUse::Discard, a full buffer's chunk freed once
  // every buffer in it is discarded this step (no bytes kept or written for dead gradients).
  parallel::ShardHold bucket_hold();
  // Holds the chunk of `tensor` (one of the parameters) in the device tier for reading until the
  // handle is dropped: pp's evaluation, whose tied head uses the embedding after its unit.
  std::shared_ptr<void> hold_for_compute(const Tensor& tensor);
  // Whether `tensor` views one of the chunks (under ZeRO-1/2 the parameters do not).
  bool in_chunks(const Tensor& tensor) const;
  // Where every state lives now: chunks per kind and tier, and the budgets.
  std::string placement() const;
  // The most chunks one step holds in the device tier at once (computed from the layout).
  int device_working_set() const { return device_need_; }
  // A checkpoint streams the state a chunk at a time: holds the chunk of `tensor` for reading
  // or writing its bytes (in the tier it is in, or read into the host tier from NVMe),
  // releasing the chunk held before, so at most one chunk beyond the tiers' budgets' own is in
  // use and no second copy of the state is made. end_checkpoint_access() releases the last.
  void hold_for_checkpoint(const Tensor& tensor, memory::AccessMode mode);
  void end_checkpoint_access();

 private:
  struct Unit {
    std::vector<int> param_chunks, state_chunks;  // state: parameters and gradients
    // The same under mixed precision: the 16-bit copies' chunks in place of their masters'.
    std::vector<int> copy_chunks, copy_state_chunks;
    std::vector<size_t> members;                     // into states_
    const std::vector<int>* forward_held = nullptr;  // what the forward / backward accessed
    const std::vector<int>* backward_held = nullptr;
    nn::Module* module = nullptr;
  };
  // The units' chunk lists from states_ (in chunks: the masters and gradients on one process,
  // the 16-bit copies), the device working set they imply, and the hooks that hold them.
  void build_units(const std::vector<parallel::Zero3Unit>& units,
                   const std::map<std::string, size_t>& index);
  void install_hooks(const std::vector<parallel::Zero3Unit>& units,
                     const std::map<std::string, size_t>& index);
  // ZeRO-1/2 under mixed precision: registers the replicas' 16-bit copies (before lay_out()).
  void add_replica_copies(const OffloadShardSetup& setup, std::map<std::string, size_t>& index);
  // The parameters' indices unit by unit in forward order (first use); every parameter named by
  // exactly one unit, or an Error naming the unit and the parameter.
  static std::vector<size_t> unit_order(const std::vector<parallel::Zero3Unit>& units,
                                        const std::map<std::string, size_t>& index);
  // UnitHooks::Listener: a unit's chunks held over its forward and its backward.
  void forward_begin(size_t unit) override;
  void forward_end(size_t unit) override;
  void backward_begin(size_t unit) override;
  void backward_end(size_t unit) override;
  void check_budgets() const;
  void check_host_holds_all() const;
  void check_shard_budgets(int zero_stage) const;
  void free_gradient_shards();  // dp: their next reduction overwrites them whole
  std::string shard_placement() const;

  // The state lives in the tiers, so the host allocator's high-water mark no longer includes it:
  // its large-block cache sizes its spare on the step's cycling blocks instead (host_memory.h).
  // On from the first step: start-up streams the state through buffers of its own, and a spare
  // grown on those would raise the start-up peak the budgets promise (train.offload_dp_startup).
  std::optional<HostCycleFollowing> follow_host_cycles_;
  std::unique_ptr<memory::ChunkManager> chunks_;
  int prefetch_;
  std::vector<OffloadedParameter> states_;
  std::vector<OffloadShard> shards_;                            // under data parallelism
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for shard holds outliving this
  // Full-buffer chunks: how many buffers each holds, and how many are discarded this step.
  std::map<int, std::pair<int, int>> bucket_chunks_;
  std::vector<Unit> units_;
  std::unique_ptr<UnitHooks> hooks_;  // after units_: its hooks go first
  OffloadAdamW* optimizer_ = nullptr;
  int device_need_ = 0;
  bool has_copies_ = false;               // mixed precision: some parameters have 16-bit copies
  bool copies_span_step_ = false;         // OffloadSetup::copies_span_step
  nn::LowPrecisionScope* low_ = nullptr;  // a micro-batch's precision scope
  bool tracing_ = false, traced_ = false;
  int64_t updates_at_start_ = 0;  // the optimizer's step count when the step began
  int checkpoint_chunk_ = -1;     // held by hold_for_checkpoint()
  bool checkpointing_ = false;    // the chunk manager is unscheduled for it
  memory::MemoryStats at_step_start_;
};

// Ends a checkpoint's chunk access when a save or load leaves, an error included (null: no
// offload, nothing to do).
class OffloadCheckpointAccess {
 public:
  explicit OffloadCheckpointAccess(OffloadStrategy* offload) : offload_(offload) {}
  ~OffloadCheckpointAccess() {
    try {
      end();
    } catch (...) {  // a destructor must not throw; the error being unwound says more
    }
  }
  OffloadCheckpointAccess(const OffloadCheckpointAccess&) = delete;
  OffloadCheckpointAccess& operator=(const OffloadCheckpointAccess&) = delete;
  void end() {
    if (offload_) offload_->end_checkpoint_access();
  }

 private:
  OffloadStrategy* offload_;
};

}  // namespace tessel::train
