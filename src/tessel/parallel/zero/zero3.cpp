// SPDX-License-Identifier: Apache-2.0
// Zero3Parameters: per-unit all_gather of flat parameter shards into the parameters' own storage
// (released and re-materialised in place, so every Tensor handle, including those autograd saved,
// stays valid), driven by module forward hooks, an identity node at each unit's output whose
// backward gathers the unit again, and grad-ready hooks that release it.
#include "tessel/parallel/zero/zero3.h"

#include <algorithm>
#include <map>
#include <set>

#include "tessel/autograd/grad_mode.h"
#include "tessel/autograd/meta.h"
#include "tessel/core/error.h"
#include "tessel/tensor/unallocated.h"

namespace tessel::parallel {

// The identity a unit's output passes through while recording: its backward runs just before
// the backward of the unit's module (it was recorded after all of it), so it gathers the unit.
class Zero3GatherBackward final : public autograd::Node {
 public:
  Zero3GatherBackward(Zero3Parameters* owner, size_t unit) : owner_(owner), unit_(unit) {}
  std::string_view name() const override { return "zero3_gather_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    owner_->on_backward(unit_);
    return {grads[0]};
  }

 private:
  Zero3Parameters* owner_;  // outlives the graphs it records (the trainer keeps both)
  size_t unit_;
};

std::vector<Zero3Unit> zero3_units(nn::Module& root, const std::vector<std::string>& paths) {
  std::map<std::string, nn::Module*> modules;
  for (auto& [name, m] : root.named_modules()) modules[name] = m;
  std::vector<Zero3Unit> listed;
  std::set<std::string> taken;
  for (const std::string& path : paths) {
    auto it = modules.find(path);
    TESSEL_CHECK(it != modules.end() && !path.empty(), "zero3_units: no submodule '", path, "' in ",
                 root.type_name());
    Zero3Unit u{path, it->second, {}};
    for (const auto& [name, t] : it->second->named_parameters()) {
      const std::string full = path + "." + name;
      TESSEL_CHECK(taken.insert(full).second, "zero3_units: parameter '", full,
                   "' is under two listed paths");
      u.params.push_back(full);
    }
    if (!u.params.empty()) listed.push_back(std::move(u));
  }
  // One unit per remaining parameter: a unit of one parameter is gathered straight into it, so
  // GPT-2's embedding matrix never needs a second buffer of its size.
  std::vector<Zero3Unit> out;
  for (const auto& [name, t] : root.named_parameters())
    if (!taken.count(name)) out.push_back(Zero3Unit{name, &root, {name}});
  for (auto& u : listed) out.push_back(std::move(u));
  return out;
}

std::vector<std::vector<size_t>> zero3_groups(const nn::NamedTensors& params,
                                              const std::vector<Zero3Unit>& units) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].first] = i;
  std::vector<std::vector<size_t>> groups;
  for (size_t k = units.size(); k-- > 0;) {
    std::vector<size_t> g;
    for (const std::string& name : units[k].params) {
      auto it = index.find(name);
      TESSEL_CHECK(it != index.end(), "zero3_groups: unit '", units[k].name, "' names parameter '",
                   name, "', which is not in the parameter list");
      g.push_back(it->second);
    }
    std::sort(g.rbegin(), g.rend());  // reverse model order inside a bucket, as DataParallel
    groups.push_back(std::move(g));
  }
  return groups;
}

Zero3Parameters::Zero3Parameters(DataParallel& dp, std::vector<Zero3Unit> units,
                                 Zero3Options options)
    : dp_(dp), options_(options), places_(dp.places()) {
  TESSEL_CHECK(dp.options().reduction == GradReduction::ReduceScatter,
               "Zero3Parameters: the DataParallel must reduce-scatter (stage 3 keeps gradient "
               "shards, as stage 2)");
  TESSEL_CHECK(!units.empty(), "Zero3Parameters: no units given");
  TESSEL_CHECK(options_.allocate_shards || !options_.copy_values,
               "Zero3Parameters: shape-only shards (allocate_shards false) cannot take the "
               "parameters' values (copy_values true)");
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < places_.size(); ++i) by_name[places_[i].name] = i;
  std::vector<int> unit_of_bucket(size_t(dp.bucket_count()), -1);
  std::vector<int> covered(places_.size(), 0);
  const int64_t rank = dp.comm().rank();
  for (size_t k = 0; k < units.size(); ++k) {
    Zero3Unit& z = units[k];
    TESSEL_CHECK(!z.params.empty(), "Zero3Parameters: unit '", z.name, "' has no parameters");
    Unit u;
    u.name = z.name;
    u.module = z.module;
    for (const std::string& name : z.params) {
      auto it = by_name.find(name);
      TESSEL_CHECK(it != by_name.end(), "Zero3Parameters: unit '", z.name, "' names '", name,
                   "', which the DataParallel does not hold");
      u.places.push_back(it->second);
      ++covered[it->second];
    }
    u.bucket = places_[u.places.front()].bucket;
    for (size_t i : u.places)
      TESSEL_CHECK(places_[i].bucket == u.bucket, "Zero3Parameters: unit '", z.name,
                   "' spans buckets ", u.bucket, " and ", places_[i].bucket,
                   "; build the DataParallel with groups = zero3_groups(...)");
    TESSEL_CHECK(unit_of_bucket[size_t(u.bucket)] < 0, "Zero3Parameters: units '",
                 units[size_t(std::max(0, unit_of_bucket[size_t(u.bucket)]))].name, "' and '",
                 z.name, "' share bucket ", u.bucket, "; each unit needs a bucket of its own");
    unit_of_bucket[size_t(u.bucket)] = int(k);
    u.size = dp.shard_numel(u.bucket);
    u.lo = rank * u.size;
    u.padded = dp.bucket_padded_numel(u.bucket);
    u.in_place = u.places.size() == 1 && places_[u.places[0]].param.numel() == u.padded;
    units_.push_back(std::move(u));
  }
  for (size_t i = 0; i < places_.size(); ++i)
    TESSEL_CHECK(covered[i] == 1, "Zero3Parameters: parameter '", places_[i].name, "' is in ",
                 covered[i], " units; each must be in exactly one");
  for (const auto& p : places_) {
    TESSEL_CHECK(p.param.offset() == 0 && p.param.storage().nbytes() == p.param.nbytes(),
                 "Zero3Parameters: parameter '", p.name,
                 "' shares its storage with other tensors; stage 3 releases it");
  }

  // Each rank keeps its block; the padding and the parts of no parameter are zeros.
  for (Unit& u : units_) {
    u.shard = options_.allocate_shards ? zeros({u.size}, DType::F32, places_.front().param.device())
                                       : unallocated({u.size}, DType::F32);
    for (size_t i : u.places) {
      const DataParallel::Place& p = places_[i];
      const int64_t begin = std::max(p.offset, u.lo);
      const int64_t end = std::min(p.offset + p.param.numel(), u.lo + u.size);
      if (end > begin && options_.copy_values)
        u.shard.narrow(0, begin - u.lo, end - begin)
            .copy_from(p.param.detach().flatten().narrow(0, begin - p.offset, end - begin));
    }
    for (size_t i : u.places) places_[i].param.storage().release();
  }

  for (size_t k = 0; k < units_.size(); ++k) {
    Unit& u = units_[k];
    for (size_t i : u.places) {
      grad_hooks_.emplace_back(
          i, autograd::register_grad_ready_hook(places_[i].param,
                                                [this, k](const Tensor&) { on_grad_ready(k); }));
    }
    if (u.module == nullptr) continue;
    u.pre_hook = u.module->register_forward_pre_hook(
        [this, k](nn::Module&, const std::vector<Tensor>&) { on_pre_forward(k); });
    u.post_hook =
        u.module->register_forward_hook([this, k](nn::Module&, const std::vector<Tensor>&,
                                                  Tensor& out) { on_post_forward(k, out); });
  }
}

Zero3Parameters::~Zero3Parameters() {
  for (Unit& u : units_) {
    try {
      if (u.work) u.work->wait();  // the collective must not write into freed buffers
    } catch (...) {
    }
    try {
      if (u.module != nullptr) {
        u.module->remove_hook(u.pre_hook);
        u.module->remove_hook(u.post_hook);
      }
    } catch (...) {  // a destructor must not throw
    }
  }
  for (auto& [place, handle] : grad_hooks_) {
    try {
      autograd::remove_grad_ready_hook(places_[place].param, handle);
    } catch (...) {
    }
  }
}

void Zero3Parameters::note_peak() {
  peak_bytes_ = std::max(peak_bytes_, gathered_bytes_ + staging_bytes_);
}

void Zero3Parameters::materialize(Unit& u) {
  for (size_t i : u.places) {
    Storage& s = places_[i].param.storage();
    if (s.is_materialized()) continue;
    s.materialize();
    gathered_bytes_ += int64_t(s.nbytes());
  }
  note_peak();
}

void Zero3Parameters::make_copies(Unit& u) {
  u.copies.resize(u.places.size());
  for (size_t j = 0; j < u.places.size(); ++j) {
    const Tensor& p = places_[u.places[j]].param;
    Tensor& c = u.copies[j];
    if (c.defined() && !c.storage().is_materialized()) {
      c.storage().materialize();
      gathered_bytes_ += int64_t(c.nbytes());
      nn::LowPrecisionScope::recast(p, c);
    }
    const Tensor now = low_->cast_deferred(p);  // the first time: the cast and its graph
    if (now.impl_ptr() == c.impl_ptr()) continue;
    if (c.defined() && c.storage().is_materialized()) gathered_bytes_ -= int64_t(c.nbytes());
    c = now;
    if (c.defined()) gathered_bytes_ += int64_t(c.nbytes());
  }
  note_peak();
}

void Zero3Parameters::set_low_precision(nn::LowPrecisionScope* scope) {
  for (Unit& u : units_) {
    for (const Tensor& c : u.copies)
      if (c.defined() && c.storage().is_materialized()) gathered_bytes_ -= int64_t(c.nbytes());
    u.copies.clear();
  }
  low_ = scope;
}

bool Zero3Parameters::holds(const Tensor& param) const {
  return std::any_of(places_.begin(), places_.end(), [&](const DataParallel::Place& p) {
    return p.param.impl_ptr() == param.impl_ptr();
  });
}

void Zero3Parameters::prefetch(size_t unit) {
  TESSEL_CHECK(unit < units_.size(), "Zero3Parameters::prefetch: unit ", unit, " out of range [0, ",
               units_.size(), ")");
  Unit& u = units_[unit];
  if (u.state != State::Released) return;
  if (hold_) u.held = hold_(u.shard, ShardUse::Gather);
  if (u.in_place) {
    materialize(u);
    const Tensor flat = places_[u.places[0]].param.detach().flatten();
    u.work = dp_.comm().all_gather_async(u.shard, flat);
  } else {
    u.staging = empty({u.padded}, DType::F32, u.shard.device());
    staging_bytes_ += int64_t(u.staging.nbytes());
    note_peak();
    u.work = dp_.comm().all_gather_async(u.shard, u.staging);
  }
  u.state = State::Gathering;
  ++gathers_;
  gather_bytes_ += 4 * u.padded;
}

void Zero3Parameters::gather(size_t unit) {
  prefetch(unit);
  Unit& u = units_[unit];
  if (u.state == State::Gathered) return;
  u.work->wait();
  u.work.reset();
  u.held.reset();
  if (!u.in_place) {
    materialize(u);
    for (size_t i : u.places) {
      const DataParallel::Place& p = places_[i];
      Tensor dst = p.param.detach();
      dst.copy_from(u.staging.narrow(0, p.offset, p.param.numel()).reshape(p.param.shape()));
    }
    staging_bytes_ -= int64_t(u.staging.nbytes());
    u.staging = Tensor();
  }
  u.state = State::Gathered;
}

void Zero3Parameters::release(size_t unit) {
  TESSEL_CHECK(unit < units_.size(), "Zero3Parameters::release: unit ", unit, " out of range [0, ",
               units_.size(), ")");
  Unit& u = units_[unit];
  if (u.state == State::Gathering) gather(unit);  // never free a buffer a collective writes into
  if (u.state != State::Gathered) return;
  for (size_t i : u.places) {
    Storage& s = places_[i].param.storage();
    if (!s.is_materialized()) continue;
    gathered_bytes_ -= int64_t(s.nbytes());
    s.release();
  }
  for (const Tensor& c : u.copies) {
    if (!c.defined() || !c.storage().is_materialized()) continue;
    gathered_bytes_ -= int64_t(c.nbytes());
    c.storage().release();
  }
  u.state = State::Released;
}

void Zero3Parameters::on_pre_forward(size_t unit) {
  if (!pinned_) {
    if (last_pre_ >= 0 && size_t(last_pre_) != unit)
      units_[size_t(last_pre_)].next_forward = int64_t(unit);
    last_pre_ = int64_t(unit);
    gather(unit);
  }
  if (low_) make_copies(units_[unit]);  // from the gathered values; before the prefetch below
  const int64_t next = units_[unit].next_forward;
  if (!pinned_ && options_.prefetch && next >= 0) prefetch(size_t(next));
}

void Zero3Parameters::on_post_forward(size_t unit, Tensor& output) {
  if (pinned_) return;
  // Backward meets the units in the reverse of the order their forwards ended.
  if (last_post_ >= 0 && size_t(last_post_) != unit) units_[unit].next_backward = last_post_;
  last_post_ = int64_t(unit);
  if (output.defined() && autograd::needs_grad({output})) {
    Tensor y = output.detach();
    autograd::record(std::make_shared<Zero3GatherBackward>(this, unit), {output}, {y});
    output = y;
  }
  release(unit);
}

void Zero3Parameters::on_backward(size_t unit) {
  Unit& u = units_[unit];
  if (!pinned_) gather(unit);
  if (low_) make_copies(u);  // the saved tensors of the unit's backward are its copies
  u.in_backward = true;
  u.pending_grads = int64_t(u.places.size());
  const int64_t next = u.next_backward;
  if (!pinned_ && options_.prefetch && next >= 0) prefetch(size_t(next));
}

void Zero3Parameters::on_grad_ready(size_t unit) {
  Unit& u = units_[unit];
  if (!u.in_backward || --u.pending_grads > 0) return;
  u.in_backward = false;
  if (!pinned_) release(unit);
}

void Zero3Parameters::finish_backward() {
  for (size_t k = 0; k < units_.size(); ++k) {
    Unit& u = units_[k];
    u.in_backward = false;
    if (u.state == State::Gathering) gather(k);
    if (!pinned_) release(k);
  }
}

void Zero3Parameters::gather_all() {
  // Offloaded shards: one at a time, so no more than one unit's shard is held at once.
  if (!hold_)
    for (size_t k = 0; k < units_.size(); ++k) prefetch(k);
  for (size_t k = 0; k < units_.size(); ++k) gather(k);
  pinned_ = true;
}

void Zero3Parameters::release_all() {
  pinned_ = false;
  for (size_t k = 0; k < units_.size(); ++k) release(k);
}

const std::string& Zero3Parameters::unit_name(size_t unit) const {
  TESSEL_CHECK(unit < units_.size(), "Zero3Parameters::unit_name: unit ", unit,
               " out of range [0, ", units_.size(), ")");
  return units_[unit].name;
}

bool Zero3Parameters::gathered(size_t unit) const {
  TESSEL_CHECK(unit < units_.size(), "Zero3Parameters::gathered: unit ", unit, " out of range [0, ",
               units_.size(), ")");
  return units_[unit].state == State::Gathered;
}

bool Zero3Parameters::gathering(size_t unit) const {
  TESSEL_CHECK(unit < units_.size(), "Zero3Parameters::gathering: unit ", unit,
               " out of range [0, ", units_.size(), ")");
  return units_[unit].state == State::Gathering;
}

int64_t Zero3Parameters::unit_bucket(size_t unit) const {
  TESSEL_CHECK(unit < units_.size(), "Zero3Parameters::unit_bucket: unit ", unit,
               " out of range [0, ", units_.size(), ")");
  return units_[unit].bucket;
}

Tensor Zero3Parameters::parameter_shard(int64_t bucket) const {
  for (const Unit& u : units_)
    if (u.bucket == bucket) return u.shard;
  TESSEL_FAIL("Zero3Parameters::parameter_shard: no unit holds bucket ", bucket);
}

bool Zero3Parameters::in_flight() const {
  return std::any_of(units_.begin(), units_.end(),
                     [](const Unit& u) { return u.state == State::Gathering; });
}

void Zero3Parameters::load_full_parameters(const nn::NamedTensors& params) {
  std::map<std::string, const Tensor*> given;
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : params)
    if (!given.emplace(name, &t).second) unexpected.push_back(name);
  std::set<std::string> known;
  for (const auto& p : places_) {
    known.insert(p.name);
    auto it = given.find(p.name);
    if (it == given.end()) {
      missing.push_back(p.name);
    } else if (!it->second->defined() || it->second->shape() != p.param.shape() ||
               !dtype_is_float(it->second->dtype())) {
      mismatched.push_back(p.name + " (expected f32 " + p.param.shape().str() + ")");
    }
  }
  for (const auto& [name, t] : params)
    if (!known.count(name)) unexpected.push_back(name);
  nn::check_state_names("Zero3Parameters.load_full_parameters", missing, unexpected, mismatched);
  for (size_t k = 0; k < units_.size(); ++k) {
    Unit& u = units_[k];
    if (u.state == State::Gathering) gather(k);
    const std::shared_ptr<void> held = hold_ ? hold_(u.shard, ShardUse::Update) : nullptr;
    for (size_t i : u.places) {
      const DataParallel::Place& p = places_[i];
      const Tensor src = given.at(p.name)->flatten();
      const int64_t begin = std::max(p.offset, u.lo);
      const int64_t end = std::min(p.offset + p.param.numel(), u.lo + u.size);
      if (end > begin)
        u.shard.narrow(0, begin - u.lo, end - begin)
            .copy_from(src.narrow(0, begin - p.offset, end - begin));
      if (u.state == State::Gathered) p.param.detach().copy_from(src.reshape(p.param.shape()));
    }
  }
}

int64_t Zero3Parameters::shard_bytes() const {
  int64_t n = 0;
  for (const Unit& u : units_) n += int64_t(u.shard.nbytes());
  return n;
}

int64_t Zero3Parameters::gathered_bytes() const {
  return gathered_bytes_;
}

int64_t Zero3Parameters::staging_bytes() const {
  return staging_bytes_;
}

}  // namespace tessel::parallel
