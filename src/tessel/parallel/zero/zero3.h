// SPDX-License-Identifier: Apache-2.0
// ZeRO stage 3 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models", SC 2020): the parameters themselves are partitioned over the dp ranks. Each rank keeps
// only its block of every flat bucket (the same byte ranges as stage 2's gradient shards); a unit
// of parameters (a transformer block, the embeddings, the final norm) is all-gathered right before
// its module's forward and released right after, gathered again when backward reaches the
// module's output, and released once all its gradients are ready. The next unit's gather is
// started asynchronously (prefetch) in both directions, in the order the last forward ran them.
//
// Works on any subset of a model's parameters (a pipeline stage's): the units name the
// parameters, and only their modules get hooks.
//
// Mixed precision: while a LowPrecisionScope is set, a unit's 16-bit weight copies are made right
// after its gather in the pre-forward hook (once per scope; the casts' graph serves every forward
// under it) and follow the f32 parameters' life: released with the unit, materialised and
// re-rounded from the gathered f32 values when the unit is gathered again (the next forward, or
// backward, whose saved tensors are these copies).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/dist/work.h"
#include "tessel/nn/autocast.h"
#include "tessel/nn/module.h"
#include "tessel/parallel/data/data_parallel.h"
#include "tessel/parallel/data/shard_hold.h"
#include "tessel/tensor/tensor.h"

namespace tessel::parallel {

// Parameters gathered and released together around the forward of `module`.
struct Zero3Unit {
  std::string name;                 // for messages and reports ("h.3", "<root>")
  nn::Module* module = nullptr;     // gets the hooks; null: gathered only by gather_all()
  std::vector<std::string> params;  // names as in the DataParallel's parameter list
};

// One unit per listed submodule path of `root` (in the given order), preceded by one unit for
// each parameter under none of them (named after it), whose hooks go on the root itself: for
// GPT-2 with paths h.0 .. h.N-1, ln_f those are wte.weight and wpe.weight, which span the whole
// forward and backward (the tied LM head uses wte at the end of forward and the start of
// backward).
std::vector<Zero3Unit> zero3_units(nn::Module& root, const std::vector<std::string>& paths);

// DataParallelOptions::groups for `units` over `params` (the list DataParallel gets): one bucket
// per unit, in reverse unit order (the order backward completes them).
std::vector<std::vector<size_t>> zero3_groups(const nn::NamedTensors& params,
                                              const std::vector<Zero3Unit>& units);

struct Zero3Options {
  bool prefetch = true;  // start the next unit's all_gather while this one computes
  // False: the parameters hold no values yet (construction without materialisation): the shards
  // stay zero for the caller to fill, and the parameters' untouched pages are never read.
  bool copy_values = true;
  // False: each shard is shape-only (a storage with a size and no bytes) until the caller lays
  // it out somewhere (memory offload puts it in a chunk, filled there): nothing of it is ever
  // resident in plain memory. Needs copy_values false.
  bool allocate_shards = true;
};

class Zero3Parameters {
 public:
  // `dp` (ReduceScatter, buckets from zero3_groups) must outlive this object. Copies this rank's
  // block of every parameter into its shard and releases the parameters' storage; registers
  // forward hooks on the units' modules and grad-ready hooks on the parameters. Local.
  Zero3Parameters(DataParallel& dp, std::vector<Zero3Unit> units, Zero3Options options = {});
  ~Zero3Parameters();  // removes its hooks; released parameters stay released
  Zero3Parameters(const Zero3Parameters&) = delete;
  Zero3Parameters& operator=(const Zero3Parameters&) = delete;

  // --- the mechanics the hooks drive (public for tests and for schedules that drive them) ---
  // Starts the unit's all_gather unless it is gathered or in flight (collective, asynchronous).
  void prefetch(size_t unit);
  // Completes the unit's gather (starting it when nobody did): its parameters hold full values.
  void gather(size_t unit);
  // Frees the unit's parameter storage (waits for a gather in flight first). Local.
  void release(size_t unit);
  // After a backward: completes gathers in flight and releases every unit not pinned (units whose
  // parameters received no gradient are released here). Call before the optimizer step.
  void finish_backward();
  // Gathers every unit in unit order and keeps them (hooks do nothing meanwhile): for writing the
  // whole model, or running it on one rank alone. Collective.
  void gather_all();
  void release_all();  // undoes gather_all(); local
  bool pinned() const { return pinned_; }
  // Mixed precision: `scope` (null: none) was built with the parameters of these units deferred
  // (holds() is its Defer); it must outlive the backward passes run while it is set. Setting it
  // (or null) drops the copies of the previous one. Local.
  void set_low_precision(nn::LowPrecisionScope* scope);
  bool holds(const Tensor& param) const;  // one of the units' parameters
  // The shards live in offloaded chunks: each all_gather holds its shard from its start to its
  // completion, and gather_all() gathers one unit at a time. Local.
  void set_shard_hold(ShardHold hold) { hold_ = std::move(hold); }

  // --- layout ---
  size_t unit_count() const { return units_.size(); }
  const std::string& unit_name(size_t unit) const;
  bool gathered(size_t unit) const;
  bool gathering(size_t unit) const;  // its all_gather is in flight
  int64_t unit_bucket(size_t unit) const;
  // This rank's block of bucket b's flat parameters: [shard_numel(b)], the optimizer updates it.
  Tensor parameter_shard(int64_t bucket) const;
  // Copies this rank's parts of full parameters (by name, any float dtype) into the shards, and
  // into gathered parameters; an Error lists missing, unexpected and mis-shaped names. Local.
  void load_full_parameters(const nn::NamedTensors& params);
  // Whether a gather is in flight (the shards must not change meanwhile).
  bool in_flight() const;

  // --- figures ---
  int64_t shard_bytes() const;     // persistent: every bucket's block
  int64_t gathered_bytes() const;  // parameter storage materialised now
  int64_t staging_bytes() const;   // gather buffers allocated now
  // Since reset_peak(): the most materialised parameters + gather buffers at once.
  int64_t peak_gathered_bytes() const { return peak_bytes_; }
  void reset_peak() { peak_bytes_ = gathered_bytes_ + staging_bytes_; }
  int64_t gathers_issued() const { return gathers_; }  // all_gathers so far
  int64_t gather_bytes_issued() const { return gather_bytes_; }

 private:
  enum class State { Released, Gathering, Gathered };
  struct Unit {
    std::string name;
    nn::Module* module = nullptr;
    std::vector<size_t> places;  // into places_
    int64_t bucket = 0;
    int64_t lo = 0, size = 0, padded = 0;
    bool in_place = false;       // one parameter, no padding: gathered straight into it
    Tensor shard;                // [size]
    Tensor staging;              // [padded] while a gather is in flight (not in place)
    std::vector<Tensor> copies;  // mixed precision: one 16-bit copy per place (or undefined)
    dist::WorkPtr work;
    std::shared_ptr<void> held;  // the shard's hold while its all_gather reads it
    State state = State::Released;
    int64_t pending_grads = 0;  // in a backward: parameters whose gradient is not ready yet
    bool in_backward = false;
    // Prefetch targets learned from the last forward (-1: none yet).
    int64_t next_forward = -1, next_backward = -1;
    int64_t pre_hook = 0, post_hook = 0;
  };

  void on_pre_forward(size_t unit);
  void on_post_forward(size_t unit, Tensor& output);
  void on_grad_ready(size_t unit);
  void materialize(Unit& u);
  void make_copies(Unit& u);  // mixed precision, after a gather
  void note_peak();
  friend class Zero3GatherBackward;
  void on_backward(size_t unit);

  DataParallel& dp_;
  Zero3Options options_;
  std::vector<DataParallel::Place> places_;
  std::vector<Unit> units_;
  std::vector<std::pair<size_t, int64_t>> grad_hooks_;  // (place, handle)
  bool pinned_ = false;
  nn::LowPrecisionScope* low_ = nullptr;
  ShardHold hold_;
  int64_t last_pre_ = -1, last_post_ = -1;
  int64_t gathered_bytes_ = 0, staging_bytes_ = 0, peak_bytes_ = 0;
  int64_t gathers_ = 0, gather_bytes_ = 0;
};

}  // namespace tessel::parallel
