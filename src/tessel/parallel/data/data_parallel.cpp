// SPDX-License-Identifier: Apache-2.0
// DataParallel: gradient buckets over reverse model order, launched from autograd's grad-ready
// hooks strictly in bucket order, awaited in finish_gradient_sync().
#include "tessel/parallel/data/data_parallel.h"

#include <set>

#include "tessel/autograd/meta.h"
#include "tessel/core/error.h"
#include "tessel/tensor/unallocated.h"

namespace tessel::parallel {

namespace {

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

DataParallel::DataParallel(std::vector<std::pair<std::string, Tensor>> params, dist::CommPtr comm,
                           DataParallelOptions options)
    : comm_(std::move(comm)), options_(options) {
  TESSEL_CHECK(comm_ != nullptr, "DataParallel: no communicator given for the dp axis");
  TESSEL_CHECK(!params.empty(), "DataParallel: no parameters given");
  TESSEL_CHECK(options_.bucket_bytes > 0, "DataParallel: bucket_bytes must be positive, got ",
               options_.bucket_bytes);
  TESSEL_CHECK(options_.max_pending_reductions >= 1,
               "DataParallel: max_pending_reductions must be >= 1, got ",
               options_.max_pending_reductions);
  std::set<const void*> seen;
  for (auto& [name, t] : params) {
    TESSEL_CHECK(t.defined(), "DataParallel: parameter '", name, "' is undefined");
    TESSEL_CHECK(autograd::is_leaf(t), "DataParallel: parameter '", name,
                 "' is not a leaf that requires grad");
    TESSEL_CHECK(t.dtype() == DType::F32, "DataParallel: parameter '", name, "' is ",
                 dtype_name(t.dtype()), "; only f32 parameters and gradients are supported");
    TESSEL_CHECK(t.device() == params.front().second.device(), "DataParallel: parameter '", name,
                 "' is on ", t.device().str(), ", the first one on ",
                 params.front().second.device().str(), "; all must share one device");
    TESSEL_CHECK(seen.insert(t.impl_ptr().get()).second, "DataParallel: parameter '", name,
                 "' is listed twice (a tied parameter must appear once)");
    slots_.push_back(Slot{name, t, Tensor(), 0, 0, 0, false});
  }

  // Gradients become ready roughly in reverse model order, so buckets are filled from the end.
  std::vector<std::vector<size_t>> groups = options_.groups;
  if (!groups.empty()) {
    std::vector<int> uses(slots_.size(), 0);
    for (const auto& group : groups) {
      TESSEL_CHECK(!group.empty(), "DataParallel: options.groups holds an empty bucket");
      for (size_t i : group) {
        TESSEL_CHECK(i < slots_.size(), "DataParallel: options.groups names parameter ", i,
                     "; there are ", slots_.size());
        ++uses[i];
      }
    }
    for (size_t i = 0; i < slots_.size(); ++i)
      TESSEL_CHECK(uses[i] == 1, "DataParallel: options.groups lists parameter '", slots_[i].name,
                   "' ", uses[i], " times; each must be in exactly one bucket");
  }
  int64_t current = 0;
  for (size_t i = slots_.size(); options_.groups.empty() && i-- > 0;) {
    const int64_t nbytes = int64_t(slots_[i].param.nbytes());
    if (groups.empty() || (current > 0 && current + nbytes > options_.bucket_bytes)) {
      groups.emplace_back();
      current = 0;
    }
    groups.back().push_back(i);
    current += nbytes;
  }
  const int64_t n = comm_->size();
  const bool scatter = options_.reduction == GradReduction::ReduceScatter;
  for (auto& group : groups) {
    Bucket b;
    for (size_t i : group) {
      Slot& s = slots_[i];
      s.bucket = int64_t(buckets_.size());
      s.offset = b.numel;
      b.numel += s.param.numel();
    }
    // Padding makes every rank's block the same size, which reduce_scatter and all_gather need;
    // all_reduce needs none, so plain data parallelism keeps unpadded buffers.
    b.padded = (b.numel + n - 1) / n * n;
    b.slots = std::move(group);
    b.pending = int64_t(b.slots.size());
    // Shape-only until laid out by the caller (memory offload's chunks); reduce-scattered
    // buffers allocated here live only from a step's first gradient to their retirement.
    if (!options_.allocate_buckets)
      b.flat = unallocated({scatter ? b.padded : b.numel});
    else if (!scatter)
      allocate(b);
    // Shape-only until laid out by the caller (memory offload's chunks).
    if (scatter && !options_.allocate_gradient_shards) b.shard = unallocated({b.padded / n});
    buckets_.push_back(std::move(b));
  }

  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].hook = autograd::register_grad_ready_hook(
        slots_[i].param, [this, i](const Tensor&) { on_grad_ready(i); });
  }
}

DataParallel::~DataParallel() {
  for (Slot& s : slots_) {
    try {
      autograd::remove_grad_ready_hook(s.param, s.hook);
    } catch (...) {  // a destructor must not throw; the hook is gone with the tensor's state
    }
  }
}

void DataParallel::allocate(Bucket& b) {
  const bool scatter = options_.reduction == GradReduction::ReduceScatter;
  b.flat = zeros({scatter ? b.padded : b.numel}, DType::F32, slots_.front().param.device());
  for (size_t i : b.slots) {
    Slot& s = slots_[i];
    s.view = b.flat.narrow(0, s.offset, s.param.numel()).reshape(s.param.shape());
  }
}

void DataParallel::allocate_bucket_buffers() {
  if (options_.allocate_buckets) return;
  TESSEL_CHECK(!in_flight() && sync_count_ == 0,
               "DataParallel::allocate_bucket_buffers: call it before the first backward");
  const bool scatter = options_.reduction == GradReduction::ReduceScatter;
  for (Bucket& b : buckets_) {
    if (scatter)
      b.flat = Tensor();  // allocated on first use in a step, as allocate_buckets true does
    else
      allocate(b);
  }
  options_.allocate_buckets = true;
}

void DataParallel::make_views(Bucket& b) {
  for (size_t i : b.slots) {
    Slot& s = slots_[i];
    if (!s.view.defined())
      s.view = b.flat.narrow(0, s.offset, s.param.numel()).reshape(s.param.shape());
  }
}

void DataParallel::hold_bucket(Bucket& b) {
  TESSEL_CHECK(hold_,
               "DataParallel: buckets laid out by the caller (allocate_buckets false) are "
               "written only under a hold; call set_shard_hold() before the first backward");
  if (!b.flat_held) b.flat_held = hold_(b.flat, ShardUse::Accumulate);
  make_views(b);
}

// The engine's AccumulateGrad has just completed this backward's gradient in .grad() (a fresh
// tensor: .grad() is kept undefined here). The first of a step is copied into the bucket, a later
// micro-batch's added with the engine's own in-place arithmetic (current + addend), so the sums
// are bitwise those of the bucket the engine accumulates into directly.
void DataParallel::accumulate_held(Slot& s, Bucket& b) {
  hold_bucket(b);
  const Tensor g = s.param.grad();
  TESSEL_CHECK(
      g.defined() && g.shape() == s.param.shape() && g.dtype() == DType::F32,
      "DataParallel: gradient of '", s.name, "' is ",
      g.defined() ? g.shape().str() + " " + std::string(dtype_name(g.dtype())) : "undefined",
      ", expected f32 ", s.param.shape());
  if (s.accumulated)
    autograd::add_gradients_into(s.view, g);
  else
    s.view.copy_from(g);
  s.accumulated = true;
  s.param.set_grad(Tensor());
  // A no-sync backward has delivered the whole bucket: it may leave its tier until the next.
  if (++b.arrived == b.slots.size() && !sync_) {
    b.arrived = 0;
    b.flat_held.reset();
  }
}

void DataParallel::add_to_gradient(const std::string& name, const Tensor& addend) {
  TESSEL_CHECK(!options_.allocate_buckets, "DataParallel::add_to_gradient('", name,
               "'): the buckets are allocated here; add into the bound .grad() instead");
  for (Slot& s : slots_) {
    if (s.name != name) continue;
    Bucket& b = buckets_[size_t(s.bucket)];
    const bool held = bool(b.flat_held);
    hold_bucket(b);  // the bucket's chunk, resident and written back, while the sum is written
    if (s.accumulated)
      autograd::add_gradients_into(s.view, addend);
    else
      s.view.copy_from(addend);
    s.accumulated = true;
    if (!held) b.flat_held.reset();
    return;
  }
  TESSEL_CHECK(false, "DataParallel::add_to_gradient: no parameter '", name, "' in the buckets");
}

void DataParallel::release_bucket(Bucket& b) {
  for (size_t i : b.slots) {
    Slot& s = slots_[i];
    if (!s.view.defined()) continue;
    // The local sums are not the average; leaving them in .grad() would invite misuse.
    const Tensor g = s.param.grad();
    if (g.defined() && g.is_same(s.view)) s.param.set_grad(Tensor());
    s.view = Tensor();
  }
  b.flat = Tensor();
}

void DataParallel::release_full_buffers() {
  for (Bucket& b : buckets_) release_bucket(b);
}

// Stage 2's saving during backward: the oldest launched buckets give their full buffers back, in
// bucket order, until `keep` remain pending. Waiting (rather than freeing whichever a test finds
// complete) makes where each buffer dies a point of the program, the same in every run. A failed
// reduction throws here and leaves its work in place for finish_gradient_sync() to report again.
void DataParallel::retire_reductions(size_t keep) {
  while (next_launch_ - next_release_ > keep) {
    Bucket& b = buckets_[next_release_];
    b.work->wait();
    b.work.reset();
    b.shard_held.reset();
    b.flat_held.reset();  // allocate_buckets false: the average stays in the laid-out buffer
    b.reduced = true;
    if (options_.reduction == GradReduction::ReduceScatter) {
      if (options_.allocate_buckets)
        release_bucket(b);
      else  // the laid-out buffer stays; its contents are dead until the next step's gradients
        hold_(b.flat, ShardUse::Discard);
    }
    ++next_release_;
  }
}

void DataParallel::broadcast_parameters(int root) {
  TESSEL_CHECK(root >= 0 && root < comm_->size(), "DataParallel::broadcast_parameters: root ", root,
               " is not a rank of '", comm_->label(), "' (size ", comm_->size(), ")");
  TESSEL_CHECK(!in_flight(),
               "DataParallel::broadcast_parameters: gradient buckets are in flight; "
               "call finish_gradient_sync() first");
  // One collective per bucket through a scratch buffer (the bucket's own buffer holds gradients).
  for (const Bucket& b : buckets_) {
    Tensor staging = empty({b.numel}, DType::F32, slots_.front().param.device());
    int64_t offset = 0;
    for (size_t i : b.slots) {
      const Tensor& p = slots_[i].param;
      staging.narrow(0, offset, p.numel()).copy_from(p.detach().flatten());
      offset += p.numel();
    }
    comm_->broadcast(staging, root);
    offset = 0;
    for (size_t i : b.slots) {
      Tensor p = slots_[i].param.detach();
      p.copy_from(staging.narrow(0, offset, p.numel()).reshape(p.shape()));
      offset += p.numel();
    }
  }
}

void DataParallel::set_sync(bool on) {
  if (!on) {
    bool started = in_flight();
    for (const Slot& s : slots_) started = started || s.fired;
    TESSEL_CHECK(!started,
                 "DataParallel::set_sync(false): a synced backward ran but "
                 "finish_gradient_sync() was not called after it");
  }
  sync_ = on;
}

bool DataParallel::in_flight() const {
  return next_launch_ > 0;
}

void DataParallel::bind_grad(Slot& s) {
  if (!s.view.defined()) allocate(buckets_[size_t(s.bucket)]);
  Tensor g = s.param.grad();
  if (g.defined() && g.is_same(s.view)) return;
  if (g.defined()) {
    TESSEL_CHECK(g.shape() == s.param.shape(), "DataParallel: gradient of '", s.name,
                 "' has shape ", g.shape(), ", expected ", s.param.shape());
    TESSEL_CHECK(g.dtype() == DType::F32, "DataParallel: gradient of '", s.name, "' is ",
                 dtype_name(g.dtype()), "; only f32 gradients are supported");
    s.view.copy_from(g);
  } else {
    s.view.fill(0.0);
  }
  s.param.set_grad(s.view);
}

void DataParallel::on_grad_ready(size_t slot) {
  Slot& s = slots_[slot];
  Bucket& b = buckets_[size_t(s.bucket)];
  TESSEL_CHECK(!b.work && !b.reduced, "DataParallel: parameter '", s.name,
               "' received a gradient while its bucket was being reduced; call "
               "finish_gradient_sync() after each synced backward");
  if (options_.allocate_buckets)
    bind_grad(s);
  else
    accumulate_held(s, b);
  if (!sync_ || s.fired) return;
  s.fired = true;
  --b.pending;
  if (!options_.overlap) return;
  launch_ready_prefix();
}

// Launching only a ready prefix keeps the order of collectives the same on every rank even when
// hooks fire in a different order there.
void DataParallel::launch_ready_prefix() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch_next();
}

// The next bucket in order, after retiring reductions beyond the bound (ReduceScatter).
void DataParallel::launch_next() {
  // Held buckets (allocate_buckets false) are retired the same way: each reduction keeps its
  // bucket in its tier until then.
  if (options_.reduction == GradReduction::ReduceScatter || !options_.allocate_buckets)
    retire_reductions(size_t(options_.max_pending_reductions - 1));
  launch(next_launch_++);
}

void DataParallel::launch(size_t bucket) {
  Bucket& b = buckets_[bucket];
  // Unused parameters (no hook fired) still take part, with whatever .grad() holds (zeros if none).
  if (!options_.allocate_buckets) {
    hold_bucket(b);
    for (size_t i : b.slots) {
      Slot& s = slots_[i];
      if (!s.fired && !s.accumulated) s.view.fill(0.0);
      TESSEL_CHECK(s.fired || !s.param.grad().defined(), "DataParallel: parameter '", s.name,
                   "' has a gradient its hook never delivered");
    }
    // The padding a reduce_scatter reads is zeros, as in a freshly allocated buffer.
    if (b.padded > b.numel && options_.reduction == GradReduction::ReduceScatter)
      b.flat.narrow(0, b.numel, b.padded - b.numel).fill(0.0);
  } else {
    for (size_t i : b.slots) {
      if (!slots_[i].fired) bind_grad(slots_[i]);
    }
  }
  if (stats_.collectives == 0) first_launch_ = std::chrono::steady_clock::now();
  if (options_.reduction == GradReduction::ReduceScatter) {
    if (!b.shard.defined())
      b.shard = empty({b.padded / comm_->size()}, DType::F32, b.flat.device());
    if (hold_) b.shard_held = hold_(b.shard, ShardUse::Reduce);
    b.work = comm_->reduce_scatter_async(b.flat, b.shard, dist::ReduceOp::Avg);
  } else {
    b.work = comm_->all_reduce_async(b.flat,
                                     options_.average ? dist::ReduceOp::Avg : dist::ReduceOp::Sum);
  }
  stats_.collectives += 1;
  stats_.bytes += int64_t(b.flat.nbytes());
}

void DataParallel::finish_gradient_sync() {
  TESSEL_CHECK(sync_,
               "DataParallel::finish_gradient_sync: sync is off (set_sync(false)); turn it "
               "on for the last micro-batch of the step");
  const auto start = std::chrono::steady_clock::now();
  const bool scatter = options_.reduction == GradReduction::ReduceScatter;
  // Reduce-scattered buffers this object allocated are freed here; laid-out ones (allocate_buckets
  // false) are retired in order, which ends their holds and discards their contents.
  const bool free_buffers = scatter && options_.allocate_buckets;
  try {
    while (next_launch_ < buckets_.size()) launch_next();
    if (scatter && !options_.allocate_buckets) retire_reductions(0);
    for (Bucket& b : buckets_)
      if (b.work) b.work->wait();  // (none: already retired and released during backward)
  } catch (...) {
    reset_step();
    if (free_buffers) release_full_buffers();
    throw;
  }
  if (free_buffers) release_full_buffers();
  ++sync_count_;
  const auto end = std::chrono::steady_clock::now();
  stats_.wait_ms = ms_between(start, end);
  stats_.comm_ms = ms_between(first_launch_, end);
  last_stats_ = stats_;
  reset_step();
}

void DataParallel::reset_step() {
  for (Slot& s : slots_) {
    s.fired = false;
    s.accumulated = false;  // the update reads the sum; the next step starts from zeros
  }
  for (Bucket& b : buckets_) {
    b.flat_held.reset();
    b.arrived = 0;
    b.pending = int64_t(b.slots.size());
    b.work.reset();
    b.shard_held.reset();  // every reduction is complete (or failed): its shard is written
    b.reduced = false;
  }
  next_launch_ = 0;
  next_release_ = 0;
  stats_ = {};
}

const DataParallel::Bucket& DataParallel::bucket_at(int64_t bucket, const char* what) const {
  TESSEL_CHECK(bucket >= 0 && bucket < bucket_count(), "DataParallel::", what, ": bucket ", bucket,
               " out of range [0, ", bucket_count(), ")");
  return buckets_[size_t(bucket)];
}

std::vector<std::string> DataParallel::bucket_parameters(int64_t bucket) const {
  std::vector<std::string> names;
  for (size_t i : bucket_at(bucket, "bucket_parameters").slots) names.push_back(slots_[i].name);
  return names;
}

int64_t DataParallel::bucket_nbytes(int64_t bucket) const {
  const Bucket& b = bucket_at(bucket, "bucket_nbytes");
  const bool scatter = options_.reduction == GradReduction::ReduceScatter;
  return 4 * (scatter ? b.padded : b.numel);
}

std::vector<DataParallel::Place> DataParallel::places() const {
  std::vector<Place> out;
  out.reserve(slots_.size());
  for (const Slot& s : slots_) out.push_back(Place{s.name, s.param, s.bucket, s.offset});
  return out;
}

int64_t DataParallel::bucket_numel(int64_t bucket) const {
  return bucket_at(bucket, "bucket_numel").numel;
}

int64_t DataParallel::bucket_padded_numel(int64_t bucket) const {
  return bucket_at(bucket, "bucket_padded_numel").padded;
}

int64_t DataParallel::shard_numel(int64_t bucket) const {
  return bucket_at(bucket, "shard_numel").padded / comm_->size();
}

Tensor DataParallel::bucket_gradients(int64_t bucket) const {
  const Bucket& b = bucket_at(bucket, "bucket_gradients");
  TESSEL_CHECK(options_.reduction == GradReduction::AllReduce,
               "DataParallel::bucket_gradients: buckets are reduce-scattered; only "
               "gradient_shard() holds the average");
  return b.flat;
}

Tensor DataParallel::bucket_buffer(int64_t bucket) const {
  const Bucket& b = bucket_at(bucket, "bucket_buffer");
  TESSEL_CHECK(
      !options_.allocate_buckets,
      "DataParallel::bucket_buffer: the buffers are this object's (allocate_buckets true)");
  return b.flat;
}

Tensor DataParallel::gradient_shard(int64_t bucket) const {
  const Bucket& b = bucket_at(bucket, "gradient_shard");
  TESSEL_CHECK(options_.reduction == GradReduction::ReduceScatter,
               "DataParallel::gradient_shard: buckets are all-reduced; use bucket_gradients()");
  TESSEL_CHECK(b.shard.defined(), "DataParallel::gradient_shard: bucket ", bucket,
               " has no shard yet; call finish_gradient_sync() after a synced backward first");
  return b.shard;
}

int64_t DataParallel::gradient_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& b : buckets_) {
    if (b.flat.defined() && options_.allocate_buckets) bytes += int64_t(b.flat.nbytes());
    // A shard laid out by the caller (memory offload's chunk) is not this object's memory: its
    // bytes are the tiers' while held, and none at all once the update has freed it.
    if (b.shard.defined() && options_.allocate_gradient_shards) bytes += int64_t(b.shard.nbytes());
  }
  return bytes;
}

}  // namespace tessel::parallel
