// SPDX-License-Identifier: Apache-2.0
// Data parallelism: every rank of the dp axis holds a full replica and runs its own shard of the
// batch; gradients are averaged over the axis. Gradients are grouped into buckets, each one flat
// buffer reduced by one all_reduce, and a bucket's reduction starts as soon as backward has
// produced all of its gradients, so communication overlaps the rest of backward (the bucketing of
// PyTorch DDP, Li et al., "PyTorch Distributed", VLDB 2020). Micro-batches of a gradient
// accumulation can skip communication altogether (no-sync), as in Megatron-LM and DDP. With
// GradReduction::ReduceScatter each bucket is reduce-scattered instead, so every rank keeps only
// its block of the averaged gradients (ZeRO stage 2, Rajbhandari et al., SC 2020).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/parallel/data/shard_hold.h"
#include "tessel/tensor/tensor.h"

namespace tessel::parallel {

// What a bucket's collective leaves on each rank.
enum class GradReduction {
  AllReduce,      // the full average everywhere (plain data parallelism, ZeRO stage 1)
  ReduceScatter,  // only this rank's block of the average (ZeRO stage 2)
};

struct DataParallelOptions {
  // Upper bound of one bucket's payload; a parameter larger than this gets a bucket of its own.
  int64_t bucket_bytes = 25 << 20;
  // false: every bucket is launched in finish_gradient_sync() (to measure what overlap buys).
  bool overlap = true;
  GradReduction reduction = GradReduction::AllReduce;
  // Explicit buckets instead of the byte budget: indices into the parameter list, one vector per
  // bucket, in launch order; every parameter exactly once. ZeRO-3 makes each gathering unit one
  // bucket this way, so a unit's parameter shards and gradient shards are the same byte ranges.
  std::vector<std::vector<size_t>> groups = {};
  // ReduceScatter: how many launched buckets may still hold their full buffers. Launching one more
  // first waits for the oldest reduction and frees its buffer. Buffers are freed only there and in
  // finish_gradient_sync(), points the program fixes, never when a reduction happens to be seen
  // complete (which depends on the other ranks' progress and moved a step's peak by a whole
  // buffer from run to run), so the peak is the same in every run and the planner's shape-only run
  // of this code predicts it. 1: one reduction overlaps the backward of the next bucket.
  int64_t max_pending_reductions = 1;
  // ReduceScatter, false: each bucket's gradient shard is shape-only (a storage with a size and
  // no bytes) from construction, for the caller to lay out somewhere before the first reduction
  // (memory offload puts it in a chunk) and to hold through set_shard_hold() while it is used.
  bool allocate_gradient_shards = true;
  // false: every bucket's flat buffer (ReduceScatter: padded) is shape-only from construction,
  // for the caller to lay out (memory offload puts it in a chunk; bucket_buffer() gives it). The
  // buffer is then only written under a hold
  // (set_shard_hold(), ShardUse::Accumulate): backward leaves each gradient the engine completes in
  // .grad() and the grad-ready hook adds it into the bucket while the bucket is held, leaving
  // .grad() undefined, so the engine never writes into a buffer that may have moved. A bucket is
  // held from its first gradient of a backward until all of its parameters' have come (no-sync
  // micro-batches) or its reduction is retired (options.max_pending_reductions later launches;
  // or finish_gradient_sync()). A retired reduce-scattered buffer is handed to the hold with
  // ShardUse::Discard (its contents are dead: the average is in the shard) instead of freed.
  bool allocate_buckets = true;
  // AllReduce: false sums the gradients over the ranks instead of averaging them (the expert
  // axis divides by another count than the group's size, docs/MOE.md).
  bool average = true;
};

// Averages the gradients of a set of leaf parameters over one communicator (the dp axis).
//
// Usage per optimizer step, with k micro-batches:
//   dp.set_sync(false);  for the first k-1: forward, backward     (no communication at all)
//   dp.set_sync(true);   for the last:      forward, backward     (buckets launch during it)
//   dp.finish_gradient_sync();                                    (every .grad() = dp average)
//
// Gradients live in the buckets: after a parameter's gradient first becomes ready, its .grad() is
// rebound to a view into its bucket's flat buffer, so accumulation adds in place and the average
// lands in .grad() without a copy back. Setting .grad() to undefined (zero_grad) is fine: the next
// backward's gradient is copied in once. After finish every parameter has a defined .grad(), zeros
// where no rank produced one.
//
// Every rank issues the same all_reduces in the same order (bucket index order) whatever the order
// its hooks fire in, and a parameter without a gradient on some rank (unused) contributes zeros.
//
// ReduceScatter: a bucket's flat buffer is padded with zeros to a multiple of the dp size, so that
// block r (elements [r * S, (r + 1) * S), S = padded / dp) is rank r's shard; one
// reduce_scatter(Avg) per bucket leaves the averaged block in gradient_shard(). The full buffers
// only live from the first gradient of a step until their reduction is retired: waited for when
// options.max_pending_reductions later buckets have been launched, or in finish_gradient_sync()
// at the latest, which frees them and leaves their parameters' .grad() undefined: the average
// exists only as the shards.
class DataParallel {
 public:
  // params: the model's named parameters (f32 leaves that require grad), in model order;
  // comm: the dp axis. Registers a grad-ready hook on every parameter.
  DataParallel(std::vector<std::pair<std::string, Tensor>> params, dist::CommPtr comm,
               DataParallelOptions options = {});
  ~DataParallel();  // removes its hooks
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Copies root's parameter values to every rank (one broadcast per bucket), so that replicas
  // start equal.
  void broadcast_parameters(int root = 0);

  // Off: backwards accumulate locally and communicate nothing. On (the default): the next backward
  // launches bucket reductions; finish_gradient_sync() must follow it.
  void set_sync(bool on);
  bool sync() const { return sync_; }

  // After the backward of a synced micro-batch: launches buckets not launched yet (unused
  // parameters), waits for all in order, and leaves in every .grad() the average over the ranks
  // (ReduceScatter: leaves this rank's block of it in every gradient_shard()).
  void finish_gradient_sync();
  // A gradient computed outside backward (a pipeline's tied embedding, whose head gradient comes
  // from the last stage after the schedule), added into parameter `name`'s before the sync, with
  // the arithmetic the engine uses on a bound .grad(). allocate_buckets false only: the sum goes
  // into the laid-out bucket under its hold (a bound .grad() takes it directly otherwise).
  void add_to_gradient(const std::string& name, const Tensor& addend);
  // finish_gradient_sync() calls completed so far (lets an optimizer refuse stale gradients).
  int64_t sync_count() const { return sync_count_; }

  struct StepStats {
    int64_t collectives = 0;  // all_reduces or reduce_scatters issued (== bucket_count())
    int64_t bytes = 0;        // payload of those all_reduces
    double wait_ms = 0;       // time spent inside finish_gradient_sync()
    double comm_ms = 0;       // from the first bucket's launch to the end of the last wait
  };
  // Of the last finished synced step (zeros before the first).
  StepStats last_stats() const { return last_stats_; }

  int64_t bucket_count() const { return int64_t(buckets_.size()); }
  // Buckets whose reduction has been launched in the current synced backward (so far).
  int64_t launched_count() const { return int64_t(next_launch_); }
  // Names of bucket i's parameters (reverse model order) and its payload in bytes.
  std::vector<std::string> bucket_parameters(int64_t bucket) const;
  int64_t bucket_nbytes(int64_t bucket) const;  // of its flat buffer (padded in ReduceScatter)
  const DataParallelOptions& options() const { return options_; }
  dist::Communicator& comm() const { return *comm_; }
  const dist::CommPtr& comm_ptr() const { return comm_; }

  // allocate_buckets false: gives up on laying the buckets out elsewhere and allocates their
  // flat buffers here after all (before the first backward), as allocate_buckets true would.
  void allocate_bucket_buffers();

  // --- the flat layout, for sharded optimizers (ZeRO) ---
  // Where a parameter's gradient lives: elements [offset, offset + numel) of bucket's buffer.
  struct Place {
    std::string name;
    Tensor param;
    int64_t bucket = 0;
    int64_t offset = 0;
  };
  std::vector<Place> places() const;                  // model order
  int64_t bucket_numel(int64_t bucket) const;         // parameter elements
  int64_t bucket_padded_numel(int64_t bucket) const;  // rounded up to a multiple of the dp size
  int64_t shard_numel(int64_t bucket) const;          // padded / dp: every rank's block size
  // AllReduce: the bucket's flat buffer (after finish_gradient_sync, the average).
  Tensor bucket_gradients(int64_t bucket) const;
  // allocate_buckets false: the bucket's shape-only flat buffer, for the caller to lay out.
  Tensor bucket_buffer(int64_t bucket) const;
  // ReduceScatter: this rank's block of the averaged bucket (defined after the first finish).
  Tensor gradient_shard(int64_t bucket) const;
  // Bytes of gradient buffers allocated now: flat buffers plus shards (the shards only when this
  // object allocates them: not with allocate_gradient_shards false).
  int64_t gradient_bytes() const;
  // ReduceScatter: the gradient shards live in offloaded chunks (shard_hold.h): each
  // reduce_scatter holds its bucket's shard (ShardUse::Reduce) from its launch until it is
  // retired. With allocate_buckets false: the flat buffers do, held with ShardUse::Accumulate
  // while backward and the reduction use them (and discarded once reduce-scattered). Local.
  void set_shard_hold(ShardHold hold) { hold_ = std::move(hold); }

 private:
  struct Slot {
    std::string name;
    Tensor param;
    Tensor view;  // the parameter's gradient inside its bucket's flat buffer
    int64_t bucket = 0;
    int64_t offset = 0;  // in the bucket's flat buffer
    int64_t hook = 0;
    bool fired = false;  // its gradient is ready in the current synced backward
    // allocate_buckets false: view holds this step's sum so far (else it is stale: zeros are due).
    bool accumulated = false;
  };
  struct Bucket {
    std::vector<size_t> slots;
    int64_t numel = 0, padded = 0;
    Tensor flat;           // ReduceScatter: allocated on first use in a step, freed by finish
    Tensor shard;          // ReduceScatter: this rank's block of the average
    int64_t pending = 0;   // slots not fired yet in the current synced backward
    dist::WorkPtr work;    // set once launched
    bool reduced = false;  // ReduceScatter: retired during backward, full buffer freed
    std::shared_ptr<void> shard_held;  // the shard's hold while its reduce_scatter writes it
    std::shared_ptr<void> flat_held;   // allocate_buckets false: the flat buffer's hold
    size_t arrived = 0;                // allocate_buckets false: gradients of this backward
  };

  void on_grad_ready(size_t slot);
  void bind_grad(Slot& s);   // .grad() becomes s.view, keeping its value (zeros if undefined)
  void allocate(Bucket& b);  // the flat buffer and its slots' views
  // allocate_buckets false: the slots' views of a buffer laid out by the caller (made after it
  // is laid out: a view taken before would keep the shape-only storage), the bucket's hold, and
  // the engine's gradient added into the held view.
  void make_views(Bucket& b);
  void hold_bucket(Bucket& b);
  void accumulate_held(Slot& s, Bucket& b);
  void release_bucket(Bucket& b);
  void release_full_buffers();
  void retire_reductions(size_t keep);
  const Bucket& bucket_at(int64_t bucket, const char* what) const;
  void launch_ready_prefix();
  void launch_next();
  void launch(size_t bucket);
  void reset_step();
  bool in_flight() const;

  std::vector<Slot> slots_;  // model order
  std::vector<Bucket> buckets_;
  dist::CommPtr comm_;
  DataParallelOptions options_;
  ShardHold hold_;
  bool sync_ = true;
  size_t next_launch_ = 0;   // buckets [0, next_launch_) are launched
  size_t next_release_ = 0;  // ReduceScatter: buckets [0, next_release_) are retired and freed
  int64_t sync_count_ = 0;
  StepStats stats_, last_stats_;
  std::chrono::steady_clock::time_point first_launch_{};
};

}  // namespace tessel::parallel
