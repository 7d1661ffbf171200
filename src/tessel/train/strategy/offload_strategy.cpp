// SPDX-License-Identifier: Apache-2.0
// OffloadStrategy: the chunk layout of a model's training state, the module hooks that hold a
// unit's chunks in the device tier while it computes, the first step's trace, and the per-tier
// traffic of each step.
#include "tessel/train/strategy/offload_strategy.h"

#include <algorithm>
#include <map>
#include <set>

#include "tessel/core/error.h"
#include "tessel/tensor/unallocated.h"
#include "tessel/train/metrics/metrics.h"

namespace tessel::train {

using memory::AccessMode;
using memory::ChunkState;
using memory::Tier;

Tensor view_of(const Tensor& like, void* bytes) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(bytes, like.nbytes(), like.device(), nullptr);
  impl->shape = like.shape();
  impl->dtype = like.dtype();
  return Tensor(std::move(impl));
}

namespace {

std::vector<int> sorted_unique(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

std::vector<size_t> OffloadStrategy::unit_order(const std::vector<parallel::Zero3Unit>& units,
                                                const std::map<std::string, size_t>& index) {
  std::vector<size_t> order;
  std::set<std::string> placed;
  for (const parallel::Zero3Unit& unit : units)
    for (const std::string& name : unit.params) {
      auto it = index.find(name);
      TESSEL_CHECK(it != index.end() && placed.insert(name).second, "offload: unit '", unit.name,
                   "' names parameter '", name,
                   "', which is not a trainable parameter or is twice");
      order.push_back(it->second);
    }
  TESSEL_CHECK(order.size() == index.size(), "offload: ", index.size() - order.size(),
               " parameters belong to no unit");
  return order;
}

OffloadStrategy::OffloadStrategy(OffloadSetup setup)
    : chunks_(std::make_unique<memory::ChunkManager>(setup.memory)), prefetch_(setup.prefetch) {
  copies_span_step_ = setup.copies_span_step;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < setup.params.size(); ++i) index[setup.params[i].first] = i;
  states_.resize(setup.params.size());
  // Mixed precision: the parameters the precision scope gives 16-bit copies.
  std::set<const TensorImpl*> covered;
  if (setup.compute == DType::BF16 || setup.compute == DType::F16)
    for (const Tensor& m : nn::LowPrecisionScope::masters(setup.low_precision_roots))
      covered.insert(m.impl_ptr().get());
  // First-use order: unit by unit as the forward meets them; the four kinds interleaved, so the
  // i-th chunk of each kind covers the same parameters (the 16-bit copies, half the bytes, fill
  // a list of their own at their own pace).
  for (const size_t i : unit_order(setup.units, index)) {
    const std::string& name = setup.params[i].first;
    const Tensor& p = setup.params[i].second;
    OffloadedParameter& s = states_[i];
    s.name = name;
    s.param = p;
    s.grad = unallocated(p.shape(), p.dtype()).set_name(name + ".grad");
    s.exp_avg = unallocated(p.shape(), p.dtype()).set_name(name + ".exp_avg");
    s.exp_avg_sq = unallocated(p.shape(), p.dtype()).set_name(name + ".exp_avg_sq");
    s.param.set_grad(s.grad);  // backward accumulates into the chunk in place
    if (covered.count(p.impl_ptr().get())) {
      s.copy = unallocated(p.shape(), setup.compute).set_name(name + ".param16");
      chunks_->add(s.copy, kCopyGroup);  // first used by the forward, before the master
      has_copies_ = true;
    }
    chunks_->add(s.param, "param");
    chunks_->add(s.grad, kGradGroup);
    chunks_->add(s.exp_avg, "adam_m");
    chunks_->add(s.exp_avg_sq, "adam_v");
  }
  chunks_->lay_out();
  build_units(setup.units, index);
  // Every check before seal(), which writes the whole state (to NVMe past the budgets).
  check_budgets();
  check_host_holds_all();  // before seal(), whose own check allows less
  memory::ChunkManager::TensorFill fill;
  if (setup.init) {
    std::map<const TensorImpl*, size_t> param_at;
    for (size_t i = 0; i < states_.size(); ++i) param_at[states_[i].param.impl_ptr().get()] = i;
    fill = [&, param_at](const Tensor& t, void* dst) {
      auto it = param_at.find(t.impl_ptr().get());
      if (it != param_at.end()) setup.init(states_[it->second].name, view_of(t, dst));
    };
  }
  chunks_->seal(fill);
  refresh_copies();  // the copies start as their masters rounded, as the scope's casts would be

  install_hooks(setup.units, index);
}

void OffloadStrategy::build_units(const std::vector<parallel::Zero3Unit>& units,
                                  const std::map<std::string, size_t>& index) {
  nn::Module* root_module = units.empty() ? nullptr : units.front().module;
  for (const parallel::Zero3Unit& unit : units) {
    Unit u;
    u.module = unit.module;
    for (const std::string& name : unit.params) {
      const OffloadedParameter& s = states_[index.at(name)];
      u.members.push_back(index.at(name));
      // Under dp the masters are ZeRO-1/2's replicas in plain memory: only their copies are in
      // chunks, and an evaluation (no scope) holds nothing.
      if (s.grad.defined()) {
        u.param_chunks.push_back(chunks_->chunk_of(s.param));
        u.state_chunks.push_back(chunks_->chunk_of(s.param));
        u.state_chunks.push_back(chunks_->chunk_of(s.grad));
      }
      if (!s.copy.defined() && !s.grad.defined()) continue;
      const int compute = chunks_->chunk_of(s.copy.defined() ? s.copy : s.param);
      u.copy_chunks.push_back(compute);
      u.copy_state_chunks.push_back(compute);
      if (s.grad.defined()) u.copy_state_chunks.push_back(chunks_->chunk_of(s.grad));
    }
    for (std::vector<int>* v :
         {&u.param_chunks, &u.state_chunks, &u.copy_chunks, &u.copy_state_chunks})
      *v = sorted_unique(std::move(*v));
    units_.push_back(std::move(u));
  }
  // The most chunks held in the device tier at once: a unit's with the root's, in f32 (an
  // evaluation's forward) and with the 16-bit copies (a training step's).
  for (auto state : {&Unit::state_chunks, &Unit::copy_state_chunks}) {
    std::set<int> root;  // chunks of the root's units: held through the whole forward / backward
    for (const Unit& u : units_)
      if (u.module == root_module) root.insert((u.*state).begin(), (u.*state).end());
    device_need_ = std::max(device_need_, int(root.size()));
    for (const Unit& u : units_) {
      std::set<int> held = root;
      held.insert((u.*state).begin(), (u.*state).end());
      device_need_ = std::max(device_need_, int(held.size()));
    }
  }
  if (copies_span_step_ && has_copies_) {  // every unit's copies and gradients at once
    std::set<int> held;
    for (const Unit& u : units_)
      held.insert(u.copy_state_chunks.begin(), u.copy_state_chunks.end());
    device_need_ = std::max(device_need_, int(held.size()));
  }
}

void OffloadStrategy::install_hooks(const std::vector<parallel::Zero3Unit>& units,
                                    const std::map<std::string, size_t>& index) {
  std::vector<UnitHooks::Unit> hooked(units_.size());
  for (size_t k = 0; k < units_.size(); ++k) {
    hooked[k].module = units_[k].module;
    for (const std::string& name : units[k].params)
      hooked[k].params.push_back(states_[index.at(name)].param);
  }
  hooks_ = std::make_unique<UnitHooks>(std::move(hooked), static_cast<UnitHooks::Listener&>(*this));
}

OffloadStrategy::~OffloadStrategy() = default;  // hooks_ removes the hooks

void OffloadStrategy::check_budgets() const {
  const memory::ChunkManager& c = *chunks_;
  const size_t cb = c.chunk_bytes();
  const size_t dev = c.pool(Tier::Device).budget(), host = c.pool(Tier::Host).budget();
  TESSEL_CHECK(dev / cb >= size_t(device_need_), "memory.device_budget of ", dev, " bytes holds ",
               dev / cb, " chunks of ", cb, " bytes, but one step holds ", device_need_,
               " chunks in the device tier at once (a unit's parameters and gradients, with the "
               "embeddings'): the smallest device budget that works is ",
               size_t(device_need_) * cb, " bytes");
  // Mixed precision: the update also rounds the row's masters into their copies' chunk.
  const size_t row = has_copies_ ? 5 : 4;
  TESSEL_CHECK(host / cb >= row, "memory.host_budget of ", host, " bytes holds ", host / cb,
               " chunks of ", cb,
               " bytes, but the CPU AdamW updates a chunk of parameters with its gradient and "
               "both moments",
               has_copies_ ? " and rounds it into a chunk of its 16-bit copies" : "",
               " in the host tier at once: the smallest host budget that works is ", row * cb,
               " bytes");
}

void OffloadStrategy::check_host_holds_all() const {
  const memory::ChunkManager& c = *chunks_;
  if (!c.nvme_dir().empty()) return;
  const size_t cb = c.chunk_bytes(), host = c.pool(Tier::Host).budget();
  const size_t n = size_t(c.num_chunks());
  // Without NVMe nothing can leave the host tier downwards, and a chunk coming up from it
  // cannot trade places with the device's victim: the host tier holds every chunk, the device
  // tier caches some.
  TESSEL_CHECK(host / cb >= n, "memory.host_budget of ", host, " bytes holds ", host / cb,
               " of the ", n, " chunks of ", cb,
               " bytes; without memory.nvme_dir the host tier holds every chunk: the smallest "
               "host budget that works is ",
               n * cb, " bytes (or set memory.nvme_dir)");
}

void OffloadStrategy::forward_begin(size_t k) {
  Unit& u = units_[k];
  u.forward_held = low_ ? &u.copy_chunks : &u.param_chunks;
  for (int id : *u.forward_held) chunks_->access(id, AccessMode::Read);
  // The unit's copies join the graph now, so their casts' backwards run within the unit's
  // backward (its gradients are complete there and its chunks released in turn).
  if (low_)
    for (size_t i : u.members)
      if (states_[i].copy.defined()) low_->cast_deferred(states_[i].param);
}

void OffloadStrategy::forward_end(size_t k) {
  for (int id : *units_[k].forward_held) chunks_->release(id, ChunkState::HoldAfterForward);
}

void OffloadStrategy::backward_begin(size_t k) {
  Unit& u = units_[k];
  u.backward_held = low_ ? &u.copy_state_chunks : &u.state_chunks;
  // Backward only reads the parameters (f32 masters or 16-bit copies) and accumulates into the
  // gradient chunks: only those are written. A parameter chunk's NVMe copy (from start-up, a
  // load or its last update) stays valid, so evicting it after backward writes nothing; only
  // the optimizer's update and loads make a parameter chunk dirty.
  for (int id : *u.backward_held)
    chunks_->access(
        id, chunks_->chunk(id).group == kGradGroup ? AccessMode::ReadWrite : AccessMode::Read);
}

void OffloadStrategy::backward_end(size_t k) {
  for (int id : *units_[k].backward_held) chunks_->release(id, ChunkState::HoldAfterBackward);
}

void OffloadStrategy::begin_step() {
  if (!follow_host_cycles_) follow_host_cycles_.emplace();
  at_step_start_ = chunks_->stats();
  if (tracing_) {  // the last step was skipped: this one is recorded instead
    chunks_->stop_trace();
    chunks_->start_trace();
  } else if (!traced_) {
    chunks_->start_trace();
    tracing_ = true;
  }
  if (optimizer_) updates_at_start_ = optimizer_->step_count();
}

void OffloadStrategy::after_backward() {
  if (hooks_) hooks_->end_backwards();
}

void OffloadStrategy::after_update() {
  if (optimizer_) optimizer_->drop_gradients();  // a skipped step's too
  free_gradient_shards();                        // dp: ZeRO-2/3's, likewise
  // ZeRO-1/2: the update's all_gather wrote every replica; their copies follow, in the traced
  // step (a skipped step's too: the same values again, and the same accesses every step).
  if (!shards_.empty()) refresh_copies(/*scheduled=*/true);
  // A skipped step (an fp16 overflow, a non-finite loss) ran no update, so its trace lacks the
  // optimizer's accesses that every later step makes: the next step is traced instead.
  const bool updated = !optimizer_ || optimizer_->step_count() != updates_at_start_;
  if (tracing_ && updated) {
    tracing_ = false;
    traced_ = true;
    chunks_->use_trace(chunks_->stop_trace(), prefetch_);
  }
}

void OffloadStrategy::hold_for_checkpoint(const Tensor& tensor, AccessMode mode) {
  // ZeRO-1/2's replicas and a last pipeline stage's tied embedding are plain memory.
  if (!in_chunks(tensor)) return;
  const int id = chunks_->chunk_of(tensor);
  if (id == checkpoint_chunk_) return;
  if (!checkpointing_) {
    chunks_->begin_unscheduled();  // the step's trace and prefetch resume where they were
    checkpointing_ = true;
  }
  if (checkpoint_chunk_ >= 0) {
    const int held = checkpoint_chunk_;
    checkpoint_chunk_ = -1;
    chunks_->release(held, ChunkState::Hold);
  }
  // Where it is when it is in memory: saving moves nothing between the memory tiers.
  const Tier tier = chunks_->chunk(id).tier == Tier::Device ? Tier::Device : Tier::Host;
  chunks_->access(id, mode, tier);
  checkpoint_chunk_ = id;
}

void OffloadStrategy::end_checkpoint_access() {
  if (checkpoint_chunk_ >= 0) {
    const int held = checkpoint_chunk_;
    checkpoint_chunk_ = -1;
    chunks_->release(held, ChunkState::Hold);
  }
  if (checkpointing_) {
    checkpointing_ = false;
    chunks_->end_unscheduled();
  }
}

void OffloadStrategy::record(StepRecord& r) {
  chunks_->check_accounting();  // every step: the pools agree with the chunks, within budget
  const memory::MemoryStats& now = chunks_->stats();
  const size_t cb = chunks_->chunk_bytes();
  r.offload = true;
  r.offload_h2d_bytes = (now.host_to_device - at_step_start_.host_to_device) * int64_t(cb);
  r.offload_d2h_bytes = (now.device_to_host - at_step_start_.device_to_host) * int64_t(cb);
  r.offload_nvme_read_bytes = int64_t(now.bytes_read - at_step_start_.bytes_read);
  r.offload_nvme_write_bytes = int64_t(now.bytes_written - at_step_start_.bytes_written);
  r.offload_evictions = now.nvme_evictions - at_step_start_.nvme_evictions;
  r.offload_clean_evictions = now.clean_evictions - at_step_start_.clean_evictions;
  r.offload_io_wait_ms = now.io_wait_ms - at_step_start_.io_wait_ms;
  r.offload_device_bytes = int64_t(chunks_->pool(Tier::Device).bytes_in_use());
  r.offload_host_bytes = int64_t(chunks_->pool(Tier::Host).bytes_in_use());
  r.offload_nvme_bytes = int64_t(chunks_->nvme_bytes_in_use());
  r.offload_nvme_file_bytes = int64_t(chunks_->nvme_file_bytes());
}

std::string OffloadStrategy::placement() const {
  const memory::ChunkManager& c = *chunks_;
  std::map<std::string, std::map<std::string, int>> where;  // kind -> tier -> chunks
  std::vector<std::string> kinds;
  for (int id = 0; id < c.num_chunks(); ++id) {
    const memory::Chunk& ch = c.chunk(id);
    if (!where.count(ch.group)) kinds.push_back(ch.group);
    ++where[ch.group][memory::tier_name(ch.tier)];
  }
  std::string out =
      "memory offload: " + std::to_string(c.num_chunks()) + " chunks of " +
      format_bytes(double(c.chunk_bytes())) + "; budgets device " +
      format_bytes(double(c.pool(Tier::Device).budget())) + ", host " +
      format_bytes(double(c.pool(Tier::Host).budget())) + ", NVMe " +
      (c.nvme_dir().empty() ? std::string("none")
                            : c.nvme_dir() + (c.direct_io() ? " (direct I/O)" : " (buffered I/O)") +
                                  ", swap file " + format_bytes(double(c.nvme_file_bytes()))) +
      "; one step holds " + std::to_string(device_need_) +
      " chunks in the device tier; the optimizer runs in the host tier\n";
  for (const std::string& kind : kinds) {
    out += "  " + kind + ":";
    for (const char* tier : {"device", "host", "nvme", "none"}) {
      auto it = where[kind].find(tier);
      if (it != where[kind].end()) out += " " + std::to_string(it->second) + " " + tier;
    }
    out += "\n";
  }
  const auto at = [&c](const Tensor& t) {
    const int id = c.chunk_of(t);
    return "chunk " + std::to_string(id) + " " + memory::tier_name(c.chunk(id).tier);
  };
  for (const OffloadedParameter& s : states_) {
    if (!s.grad.defined()) {  // under dp: a ZeRO-1/2 replica in plain memory, its copy in chunks
      if (s.copy.defined()) out += "  " + s.name + " (replicated): param16 " + at(s.copy) + "\n";
      continue;
    }
    out += "  " + s.name + ": " + (s.copy.defined() ? "param16 " + at(s.copy) + ", " : "") +
           "param " + at(s.param) + ", grad " + at(s.grad) + ", adam_m " + at(s.exp_avg) +
           ", adam_v " + at(s.exp_avg_sq) + "\n";
  }
  out += shard_placement();
  out.pop_back();
  return out;
}

}  // namespace tessel::train
