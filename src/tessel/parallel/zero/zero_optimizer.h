// SPDX-License-Identifier: Apache-2.0
// ZeRO stages 1 and 2 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", SC 2020) for AdamW: every rank of the dp axis keeps the Adam moments of only
// its block of each gradient bucket, updates only the parameters of that block, and all-gathers the
// updated blocks so that every replica ends with the same parameters. Stage 1 partitions the
// optimizer state (gradients are all-reduced in full); stage 2 also partitions the gradients
// (DataParallel reduce-scatters them, so each rank receives only its block of the average).
// Stage 3 also partitions the parameters (zero3.h): the update writes the parameter shards that
// Zero3Parameters gathers before each use, and nothing is gathered after the step.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessel/parallel/data/data_parallel.h"
#include "tessel/parallel/zero/zero3.h"
#include "tessel/tensor/tensor.h"

namespace tessel::parallel {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct ZeroOptions {
  int stage = 1;  // 1: optimizer state partitioned; 2: gradients too; 3: parameters too
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;  // applied to parameters of two or more dimensions only
  // False: the moments' shards are shape-only (zeros once laid out somewhere: memory offload
  // puts them in chunks), so they are never resident in plain memory.
  bool allocate_moments = true;
};

// Bytes on this rank, and what the ZeRO paper's model predicts for them. With Ψ parameters, f32
// everywhere and dp ranks: parameters 4Ψ (4Ψ/dp in stage 3), gradients 4Ψ (stage 1) or 4Ψ/dp
// (stages 2, 3), Adam's two moments 8Ψ/dp. (The paper's K = 12 counts an f32 master copy next to
// f16 parameters, which pure f32 training does not have.)
struct MemoryReport {
  int64_t parameter_count = 0;  // Ψ
  int dp = 1;
  int stage = 1;
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;       // gradient buffers held now (between steps); offloaded shards: 0
  int64_t optimizer_bytes = 0;  // moments of this rank's shards
  int64_t comm_bytes = 0;       // the all_gather staging buffer (largest multi-parameter bucket)
  // Stage 3: parameters gathered now (included in param_bytes) and the most gathered at once
  // (parameters and gather buffers) since the last Zero3Parameters::reset_peak().
  int64_t gathered_param_bytes = 0, peak_gathered_bytes = 0;
  int64_t expected_param_bytes = 0, expected_grad_bytes = 0, expected_optimizer_bytes = 0;

  int64_t total() const { return param_bytes + grad_bytes + optimizer_bytes + comm_bytes; }
  int64_t expected_total() const {
    return expected_param_bytes + expected_grad_bytes + expected_optimizer_bytes;
  }
};

// AdamW over the shards of a DataParallel's buckets. Its arithmetic is the kernel backend's adamw,
// as train::AdamW's is, so with equal gradients the updated parameters are bitwise the same.
//
// One optimizer step (k micro-batches):
//   dp.set_sync(...) / backward as usual; dp.finish_gradient_sync();
//   the norm over gradients() (summed over dp from stage 2), then the same spans scaled by the
//   1/k of accumulation and the clipping factor (train/optim/grad_norm.h);
//   zero.step(lr);                                collective: one all_gather per bucket
class ZeroAdamW {
 public:
  // `dp` must outlive this optimizer; stage 1 needs GradReduction::AllReduce, stages 2 and 3
  // GradReduction::ReduceScatter; stage 3 needs `params` (built on the same dp), which must
  // outlive it too.
  ZeroAdamW(DataParallel& dp, const ZeroOptions& options, Zero3Parameters* params = nullptr);

  int stage() const { return options_.stage; }
  // The shards live in offloaded chunks (zero3.h, ShardHold): the update, the moments' gathers
  // and loads hold each bucket's shards while they work on them. Local.
  void set_shard_hold(ShardHold hold) { hold_ = std::move(hold); }

  // The averaged gradients step() reads, one flat tensor per bucket: stage 1 the full
  // all-reduced buffers (the same on every rank), stages 2 and 3 this rank's shards (their
  // padding is zeros).
  std::vector<Tensor> gradients() const;
  // One AdamW update of this rank's shards, then one all_gather per bucket (collective; stage 3:
  // none, the next forward gathers). Requires a finish_gradient_sync() since the previous step.
  // Increments step_count() first.
  void step(double lr);
  int64_t step_count() const { return step_; }
  // For checkpoints that restore the moment shards in place (local_state()'s tensors).
  void set_step_count(int64_t step) { step_ = step; }

  // Collective: the full moments by parameter name ("exp_avg.NAME", then "exp_avg_sq.NAME", in
  // model order: train::AdamW::state()'s names and order), assembled from every rank's shards.
  NamedTensors gathered_state() const;
  // Takes full moments by name (as gathered_state() or train::AdamW::state() give them) and keeps
  // this rank's shard; one Error lists every missing, unexpected or mis-shaped name. Local.
  void load_full_state(const NamedTensors& state, int64_t step);

  MemoryReport memory() const;

  // This rank's moments as they are: "exp_avg.b<i>" and "exp_avg_sq.b<i>" for bucket i, each the
  // block [shard_numel(i)] (for per-rank checkpoint shards).
  NamedTensors local_state() const;

 private:
  // The part of one parameter inside this rank's shard of its bucket.
  struct Range {
    size_t place = 0;    // index into places_
    int64_t begin = 0;   // in the bucket's flat coordinates
    int64_t length = 0;  // > 0
    bool decay = false;
  };
  struct Shard {
    int64_t lo = 0, size = 0;  // block [lo, lo + size) of the padded bucket
    int64_t padded = 0;
    std::vector<Range> ranges;   // in flat order
    std::vector<size_t> places;  // every parameter of the bucket
    Tensor exp_avg, exp_avg_sq;  // [size], f32
    bool in_place = false;       // parameters gathered straight into the one parameter
  };

  Tensor grad_shard(size_t bucket) const;  // [size] averaged gradients of the shard
  // Parameter values of the block go into staging's block; all_gather; copy back to every param.
  void gather_parameters(size_t bucket);
  // Holds the shards of one bucket (parameters at stage 3, both moments); null when not offloaded.
  std::vector<std::shared_ptr<void>> hold_bucket(size_t bucket) const;
  // all_gather of one moment's shards into staging_; returns the padded full buffer.
  Tensor gather_moment(size_t bucket, const Tensor& shard) const;

  DataParallel& dp_;
  ZeroOptions options_;
  Zero3Parameters* params_ = nullptr;  // stage 3
  ShardHold hold_;
  std::vector<DataParallel::Place> places_;
  std::vector<Shard> shards_;  // by bucket
  Tensor staging_;  // the largest padded bucket not gathered in place; reused by every all_gather
  int64_t step_ = 0;
  int64_t synced_at_step_ = 0;  // dp_.sync_count() at the last step
};

}  // namespace tessel::parallel
