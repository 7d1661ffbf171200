// SPDX-License-Identifier: Apache-2.0
// OffloadStrategy under data parallelism (ZeRO-Infinity, Rajbhandari et al. 2021: each rank
// offloads its own partition): the rank's ZeRO shards -- the parameter shards at stage 3 and
// both AdamW moments' shards -- laid out in chunks, one row per bucket in the order the step
// first uses them. ZeRO's gathers, reductions and update run unchanged on the same tensors (now
// views of chunks), holding each shard's chunk through shard_hold() while they read or write it,
// so the arithmetic, and every bit of its result, is the in-memory run's. At stages 1 and 2 under
// mixed precision the replicas' 16-bit copies join them, unit by unit (offload_copies.cpp).
#include <algorithm>
#include <map>
#include <set>

#include "tessel/core/error.h"
#include "tessel/train/strategy/offload_strategy.h"

namespace tessel::train {

using memory::AccessMode;
using memory::Tier;

OffloadStrategy::OffloadStrategy(OffloadShardSetup setup)
    : chunks_(std::make_unique<memory::ChunkManager>(setup.memory)),
      prefetch_(setup.prefetch),
      shards_(std::move(setup.shards)) {
  copies_span_step_ = setup.copies_span_step;
  TESSEL_CHECK(!shards_.empty(), "offload: no ZeRO shards to lay out");
  // ZeRO-1/2 under mixed precision: the replicas' 16-bit copies, first used by the forward.
  std::map<std::string, size_t> index;
  add_replica_copies(setup, index);
  // The parameter shards, when start-up fills them: each one's shard in shards_.
  std::map<const TensorImpl*, size_t> shard_of;
  for (size_t i = 0; i < shards_.size(); ++i) {
    OffloadShard& s = shards_[i];
    // ZeRO's shards carry no names of their own; the layout's errors and placement name them.
    for (auto [t, what] : {std::pair{&s.param, "parameter shard"},
                           {&s.full, "gradient bucket"},
                           {&s.grad, "gradient shard"},
                           {&s.exp_avg, "exp_avg shard"},
                           {&s.exp_avg_sq, "exp_avg_sq shard"}})
      if (t->defined() && t->name().empty()) t->set_name(s.name + " " + what);
    if (s.param.defined()) {
      chunks_->add(s.param, "param");
      shard_of[s.param.impl_ptr().get()] = i;
    }
    if (s.full.defined()) chunks_->add(s.full, kBucketGroup);
    if (s.grad.defined()) chunks_->add(s.grad, kGradGroup);
    chunks_->add(s.exp_avg, "adam_m");
    chunks_->add(s.exp_avg_sq, "adam_v");
  }
  chunks_->lay_out();
  for (const OffloadShard& s : shards_)
    if (s.full.defined()) ++bucket_chunks_[chunks_->chunk_of(s.full)].first;
  check_host_holds_all();
  // ZeRO-3 holds a unit's parameter shard in the device tier from its all_gather's start to its
  // completion; with the next unit's gather started ahead (and one more a mispredicted prefetch
  // may leave in flight), at most three at once. Below stage 3 only the 16-bit copies use the
  // device tier, held unit by unit as on one process (build_units counts them).
  if (has_copies_) {
    build_units(setup.units, index);
  } else {
    // Per group of gathers (the dense units', the experts'): each prefetches on its own.
    std::map<int, std::set<int>> param_chunks;
    for (const OffloadShard& s : shards_)
      if (s.param.defined()) param_chunks[s.gathers].insert(chunks_->chunk_of(s.param));
    for (const auto& [group, ids] : param_chunks) device_need_ += std::min(3, int(ids.size()));
  }
  // ZeRO-1's all-reduced buckets are held in the device tier while backward adds into them and
  // their all_reduce runs: the one in flight (DataParallel retires the one before when it launches
  // the next) and the ones backward is filling meanwhile, at most two with GPT-2's order; three
  // leave room for a bucket whose gradients arrive early. Besides the copies' working set.
  // ZeRO-2/3's full buffers the same way: each reduce_scatter keeps its bucket held until it is
  // retired, and backward fills the next ones meanwhile.
  if (setup.zero_stage == 1) {
    std::set<int> grad_chunks;
    for (const OffloadShard& s : shards_)
      if (s.grad.defined()) grad_chunks.insert(chunks_->chunk_of(s.grad));
    device_need_ += std::min(3, int(grad_chunks.size()));
  } else {
    device_need_ += std::min(3, int(bucket_chunks_.size()));
  }
  check_shard_budgets(setup.zero_stage);  // before seal(), which writes the whole state
  // Start-up streams, as on one process: ZeRO made the shards shape-only, and each parameter
  // shard is computed into its chunk as the chunks are sealed one after another within the
  // budgets (the moments start as zeros), so no shard is ever whole in plain memory.
  memory::ChunkManager::TensorFill fill;
  const bool any_init =
      setup.init_param || std::any_of(shards_.begin(), shards_.end(),
                                      [](const OffloadShard& s) { return bool(s.init_param); });
  if (any_init) {
    fill = [this, &setup, &shard_of](const Tensor& t, void* dst) {
      auto it = shard_of.find(t.impl_ptr().get());
      if (it == shard_of.end()) return;
      const OffloadShard& s = shards_[it->second];
      if (s.init_param)
        s.init_param(view_of(t, dst));
      else if (setup.init_param)
        setup.init_param(s.bucket, view_of(t, dst));
    };
  }
  chunks_->seal(fill);
  // No gradient before the first reduction writes it: the gradient chunks hold no bytes.
  free_gradient_shards();
  if (has_copies_) {
    refresh_copies();  // from the replicas, filled before the shards were laid out
    install_hooks(setup.units, index);
  }
}

void OffloadStrategy::check_shard_budgets(int zero_stage) const {
  const memory::ChunkManager& c = *chunks_;
  const size_t cb = c.chunk_bytes();
  const size_t dev = c.pool(Tier::Device).budget(), host = c.pool(Tier::Host).budget();
  const bool grads = std::any_of(shards_.begin(), shards_.end(),
                                 [](const OffloadShard& s) { return s.grad.defined(); });
  // What the device tier holds at once, part by part, for the message.
  std::string parts;
  const auto part = [&parts](const char* what) {
    parts += (parts.empty() ? "" : "; ") + std::string(what);
  };
  if (has_copies_)
    part(copies_span_step_ ? "16-bit copies: every unit's, kept over the step's micro-batches"
                           : "16-bit copies: a unit's, with the embeddings'");
  if (zero_stage == 3)
    part("parameter shards: a unit's all_gather and the next ones started ahead");
  if (zero_stage == 1 && grads)
    part("all-reduced gradient buckets: the one reducing and the ones backward fills");
  if (!bucket_chunks_.empty())
    part("full gradient buckets: the one reduce-scattering and the ones backward fills");
  TESSEL_CHECK(dev / cb >= size_t(device_need_), "memory.device_budget of ", dev, " bytes holds ",
               dev / cb, " chunks of ", cb, " bytes, but one step holds up to ", device_need_,
               " chunks in the device tier at once (", parts,
               "): the smallest device budget that works is ", size_t(device_need_) * cb, " bytes");
  // The update holds a bucket's row: its parameter shard (stage 3), gradient shard (stages 2
  // and 3; the all-reduced bucket, read, at stage 1) and both moments' shards. During backward the
  // host tier holds only the gradient shard a reduce_scatter is writing (one at a time), so the row
  // is the most.
  // (ZeRO-1's buckets are plain memory when they do not fit a chunk: no gradient in the row.)
  const size_t row = 2 + (zero_stage == 3 ? 1 : 0) + (grads ? 1 : 0);
  const char* what = zero_stage == 3   ? "parameter shard, gradient shard and both moments' shards"
                     : zero_stage == 2 ? "gradient shard and both moments' shards"
                     : grads           ? "all-reduced gradients and both moments' shards"
                                       : "shards of both moments";
  TESSEL_CHECK(host / cb >= row, "memory.host_budget of ", host, " bytes holds ", host / cb,
               " chunks of ", cb, " bytes, but the ZeRO update holds a bucket's ", what,
               " in the host tier at once: the smallest host budget that works is ", row * cb,
               " bytes");
}

void OffloadStrategy::free_gradient_shards() {
  for (const OffloadShard& s : shards_) {
    if (s.grad.defined()) chunks_->free(chunks_->chunk_of(s.grad));
    if (s.full.defined()) chunks_->free(chunks_->chunk_of(s.full));
  }
  for (auto& [id, count] : bucket_chunks_) count.second = 0;
}

parallel::ShardHold OffloadStrategy::shard_hold() {
  const std::weak_ptr<bool> alive = alive_;
  memory::ChunkManager* chunks = chunks_.get();
  return [alive, chunks](const Tensor& shard, parallel::ShardUse use) -> std::shared_ptr<void> {
    TESSEL_CHECK(!alive.expired(), "offload: a ZeRO shard is used after its chunks are gone");
    const int id = chunks->chunk_of(shard);
    // A gather only reads (a clean NVMe copy stays valid), in the device tier; the update and
    // loads write, a gradient reduction writes and the norm reads, all in the host tier, where
    // the optimizer runs (ZeRO-Offload moves reduced gradients to the host for the update).
    if (use == parallel::ShardUse::Gather) {
      chunks->access(id, AccessMode::Read, Tier::Device);
    } else if (use == parallel::ShardUse::Accumulate) {  // backward and its all_reduce write it
      chunks->access(id, AccessMode::ReadWrite, Tier::Device);
    } else if (use == parallel::ShardUse::Read) {
      chunks->access(id, AccessMode::Read, Tier::Host);
    } else {
      chunks->access(id, AccessMode::ReadWrite, Tier::Host);
    }
    return std::shared_ptr<void>(chunks, [alive, id](void* p) {
      if (alive.expired()) return;  // the trainer is being torn down, the chunks with it
      try {
        static_cast<memory::ChunkManager*>(p)->release(id);
      } catch (...) {  // a deleter must not throw; release fails only on a broken state machine
      }
    });
  };
}

parallel::ShardHold OffloadStrategy::bucket_hold() {
  const parallel::ShardHold hold = shard_hold();
  return [this, hold](const Tensor& flat, parallel::ShardUse use) -> std::shared_ptr<void> {
    if (use != parallel::ShardUse::Discard) return hold(flat, use);
    // A chunk may hold several buckets' buffers, some still being filled: it is freed when the
    // last of them is retired (every bucket is, once per synced step), so no dead gradient is
    // ever kept or written, and the next step's first access starts from zeros.
    auto it = bucket_chunks_.find(chunks_->chunk_of(flat));
    TESSEL_CHECK(it != bucket_chunks_.end(),
                 "offload: discarding a buffer that is not a full "
                 "gradient bucket's chunk (chunk ",
                 chunks_->chunk_of(flat), ")");
    if (++it->second.second == it->second.first) {
      chunks_->free(it->first);
      it->second.second = 0;
    }
    return nullptr;
  };
}

SpanHold OffloadStrategy::gradient_hold() {
  const parallel::ShardHold hold = shard_hold();
  return [this, hold](const Tensor& flat, bool write) -> std::shared_ptr<void> {
    if (!in_chunks(flat)) return nullptr;  // plain memory: nothing to hold
    return hold(flat, write ? parallel::ShardUse::Update : parallel::ShardUse::Read);
  };
}

std::shared_ptr<void> OffloadStrategy::hold_for_compute(const Tensor& tensor) {
  return shard_hold()(tensor, parallel::ShardUse::Gather);  // read-only, in the device tier
}

bool OffloadStrategy::in_chunks(const Tensor& tensor) const {
  const Storage* s = tensor.storage_ptr().get();
  for (int id = 0; id < chunks_->num_chunks(); ++id)
    if (chunks_->chunk(id).storage.get() == s) return true;
  return false;
}

std::string OffloadStrategy::shard_placement() const {
  std::string out;
  const memory::ChunkManager& c = *chunks_;
  const auto at = [&c](const Tensor& t) {
    const int id = c.chunk_of(t);
    return "chunk " + std::to_string(id) + " " + memory::tier_name(c.chunk(id).tier);
  };
  for (const OffloadShard& s : shards_) {
    out += "  " + s.name + " (this rank's shard): ";
    if (s.param.defined()) out += "param " + at(s.param) + ", ";
    if (s.full.defined()) out += "grad_bucket " + at(s.full) + ", ";
    if (s.grad.defined()) out += "grad " + at(s.grad) + ", ";
    out += "adam_m " + at(s.exp_avg) + ", adam_v " + at(s.exp_avg_sq) + "\n";
  }
  return out;
}

}  // namespace tessel::train
