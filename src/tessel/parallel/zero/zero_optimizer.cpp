// SPDX-License-Identifier: Apache-2.0
// ZeroAdamW: AdamW on this rank's block of every gradient bucket (ZeRO stages 1 and 2), the
// updated blocks all-gathered back into every replica. A block mixes parameters, so the kernel's
// adamw runs once per (parameter ∩ block) range, each with its own weight decay.
#include "tessel/parallel/zero/zero_optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include "tessel/autograd/backend_scope.h"
#include "tessel/core/error.h"
#include "tessel/core/threads.h"
#include "tessel/nn/module.h"
#include "tessel/tensor/unallocated.h"

namespace tessel::parallel {

namespace {

const std::string kExpAvg = "exp_avg.";
const std::string kExpAvgSq = "exp_avg_sq.";

// A parameter's elements as one flat view of its storage.
Tensor flat_param(const Tensor& p) {
  return p.detach().flatten();
}

}  // namespace

ZeroAdamW::ZeroAdamW(DataParallel& dp, const ZeroOptions& options, Zero3Parameters* params)
    : dp_(dp), options_(options), params_(params), places_(dp.places()) {
  const ZeroOptions& o = options_;
  TESSEL_CHECK(o.stage >= 1 && o.stage <= 3, "ZeroAdamW: stage must be 1, 2 or 3, got ", o.stage);
  TESSEL_CHECK((o.stage == 3) == (params != nullptr), "ZeroAdamW: stage ", o.stage,
               o.stage == 3 ? " needs the Zero3Parameters that hold the parameter shards"
                            : " takes no Zero3Parameters (only stage 3 partitions parameters)");
  const GradReduction want = o.stage >= 2 ? GradReduction::ReduceScatter : GradReduction::AllReduce;
  TESSEL_CHECK(dp.options().reduction == want, "ZeroAdamW: stage ", o.stage,
               " needs a DataParallel whose reduction is ",
               o.stage >= 2 ? "ReduceScatter" : "AllReduce", "; this one ",
               o.stage >= 2 ? "all-reduces" : "reduce-scatters");
  kernels::check_adamw_hyperparameters("ZeroAdamW", o.beta1, o.beta2, o.eps, o.weight_decay);

  const int64_t rank = dp.comm().rank();
  const Device device = places_.front().param.device();
  shards_.resize(size_t(dp.bucket_count()));
  int64_t largest = 0;
  for (size_t b = 0; b < shards_.size(); ++b) {
    Shard& s = shards_[b];
    s.size = dp.shard_numel(int64_t(b));
    s.lo = rank * s.size;
    s.padded = dp.bucket_padded_numel(int64_t(b));
    s.exp_avg = o.allocate_moments ? zeros({s.size}, DType::F32, device) : unallocated({s.size});
    s.exp_avg_sq = o.allocate_moments ? zeros({s.size}, DType::F32, device) : unallocated({s.size});
  }
  for (size_t i = 0; i < places_.size(); ++i) {
    const DataParallel::Place& p = places_[i];
    Shard& s = shards_[size_t(p.bucket)];
    s.places.push_back(i);
    const int64_t begin = std::max(p.offset, s.lo);
    const int64_t end = std::min(p.offset + p.param.numel(), s.lo + s.size);
    if (end > begin)
      s.ranges.push_back(Range{i, begin, end - begin, kernels::adamw_decays(p.param.shape())});
  }
  for (Shard& s : shards_) {
    std::sort(s.ranges.begin(), s.ranges.end(),
              [](const Range& a, const Range& b) { return a.begin < b.begin; });
    // A bucket of one parameter that needs no padding is its own gather buffer. This spares the
    // staging copy of the largest tensors (GPT-2's embedding alone is 30% of its parameters).
    s.in_place = s.places.size() == 1 && s.padded == places_[s.places.front()].param.numel();
    if (!s.in_place && o.stage != 3) largest = std::max(largest, s.padded);
  }
  if (largest > 0) staging_ = zeros({largest}, DType::F32, device);
}

Tensor ZeroAdamW::grad_shard(size_t bucket) const {
  if (options_.stage >= 2) return dp_.gradient_shard(int64_t(bucket));
  const Shard& s = shards_[bucket];
  // Stage 1 buffers are unpadded: the last rank's block may reach past the parameters.
  const int64_t numel = dp_.bucket_numel(int64_t(bucket));
  const int64_t size = std::clamp<int64_t>(numel - s.lo, 0, s.size);
  return dp_.bucket_gradients(int64_t(bucket)).narrow(0, std::min(s.lo, numel), size);
}

std::vector<Tensor> ZeroAdamW::gradients() const {
  std::vector<Tensor> out;
  for (size_t b = 0; b < shards_.size(); ++b)
    out.push_back(options_.stage == 1 ? dp_.bucket_gradients(int64_t(b)) : grad_shard(b));
  return out;
}

void ZeroAdamW::step(double lr) {
  TESSEL_CHECK(std::isfinite(lr) && lr >= 0, "ZeroAdamW.step: lr must be finite and >= 0, got ",
               lr);
  TESSEL_CHECK(dp_.sync_count() > synced_at_step_, "ZeroAdamW.step: no finish_gradient_sync() ",
               "since the last step (sync count ", dp_.sync_count(),
               "); the gradients are not averaged");
  TESSEL_CHECK(params_ == nullptr || !params_->in_flight(),
               "ZeroAdamW.step: parameter gathers are in flight; call "
               "Zero3Parameters::finish_backward() after backward");
  synced_at_step_ = dp_.sync_count();
  ++step_;
  kernels::AdamWParams h{lr, options_.beta1, options_.beta2, options_.eps, 0.0, step_};
  for (size_t b = 0; b < shards_.size(); ++b) {
    Shard& s = shards_[b];
    const std::vector<std::shared_ptr<void>> held = hold_bucket(b);
    const Tensor grads = grad_shard(b);
    // The gradients may be offloaded too (DataParallel's shards at stages 2/3, its laid-out
    // all-reduced buckets at stage 1); only read.
    const bool grads_offloaded = options_.stage >= 2 || !dp_.options().allocate_buckets;
    const std::shared_ptr<void> grads_held =
        hold_ && grads_offloaded ? hold_(grads, ShardUse::Read) : nullptr;
    const Tensor own = params_ ? params_->parameter_shard(int64_t(b)) : Tensor();
    for (const Range& r : s.ranges) {
      const DataParallel::Place& p = places_[r.place];
      Tensor param = params_ ? own.narrow(0, r.begin - s.lo, r.length)
                             : flat_param(p.param).narrow(0, r.begin - p.offset, r.length);
      const Tensor g = grads.narrow(0, r.begin - s.lo, r.length);
      Tensor m = s.exp_avg.narrow(0, r.begin - s.lo, r.length);
      Tensor v = s.exp_avg_sq.narrow(0, r.begin - s.lo, r.length);
      h.weight_decay = r.decay ? options_.weight_decay : 0.0;
      autograd::backend_for(param.device()).adamw(param, g, m, v, h);
    }
    if (!params_) gather_parameters(b);
  }
}

std::vector<std::shared_ptr<void>> ZeroAdamW::hold_bucket(size_t bucket) const {
  if (!hold_) return {};
  const Shard& s = shards_[bucket];
  std::vector<std::shared_ptr<void>> held;
  if (params_) held.push_back(hold_(params_->parameter_shard(int64_t(bucket)), ShardUse::Update));
  held.push_back(hold_(s.exp_avg, ShardUse::Update));
  held.push_back(hold_(s.exp_avg_sq, ShardUse::Update));
  return held;
}

void ZeroAdamW::gather_parameters(size_t bucket) {
  const Shard& s = shards_[bucket];
  if (s.in_place) {
    const Tensor param = flat_param(places_[s.places.front()].param);
    dp_.comm().all_gather(param.narrow(0, s.lo, s.size), param);
    return;
  }
  Tensor full_buffer = staging_.narrow(0, 0, s.padded);
  Tensor block = full_buffer.narrow(0, s.lo, s.size);
  block.fill(0.0);  // padding (and the parts of no parameter) travel as zeros
  for (const Range& r : s.ranges) {
    const DataParallel::Place& p = places_[r.place];
    block.narrow(0, r.begin - s.lo, r.length)
        .copy_from(flat_param(p.param).narrow(0, r.begin - p.offset, r.length));
  }
  dp_.comm().all_gather(block, full_buffer);
  // Every rank copies every block back, its own included, so all replicas hold the same bits.
  for (size_t i : s.places) {
    const DataParallel::Place& p = places_[i];
    flat_param(p.param).copy_from(full_buffer.narrow(0, p.offset, p.param.numel()));
  }
}

Tensor ZeroAdamW::gather_moment(size_t bucket, const Tensor& shard) const {
  const Shard& s = shards_[bucket];
  Tensor out = empty({s.padded}, DType::F32, shard.device());
  dp_.comm().all_gather(shard, out);
  return out;
}

NamedTensors ZeroAdamW::gathered_state() const {
  std::vector<Tensor> avg(places_.size()), avg_sq(places_.size());
  for (size_t b = 0; b < shards_.size(); ++b) {
    const Shard& s = shards_[b];
    const std::vector<std::shared_ptr<void>> held = hold_bucket(b);
    const Tensor m = gather_moment(b, s.exp_avg);
    const Tensor v = gather_moment(b, s.exp_avg_sq);
    for (size_t i : s.places) {
      const DataParallel::Place& p = places_[i];
      avg[i] = m.narrow(0, p.offset, p.param.numel()).clone().reshape(p.param.shape());
      avg_sq[i] = v.narrow(0, p.offset, p.param.numel()).clone().reshape(p.param.shape());
    }
  }
  NamedTensors out;
  out.reserve(2 * places_.size());
  for (size_t i = 0; i < places_.size(); ++i) out.emplace_back(kExpAvg + places_[i].name, avg[i]);
  for (size_t i = 0; i < places_.size(); ++i)
    out.emplace_back(kExpAvgSq + places_[i].name, avg_sq[i]);
  return out;
}

void ZeroAdamW::load_full_state(const NamedTensors& state, int64_t step) {
  TESSEL_CHECK(step >= 0, "ZeroAdamW.load_full_state: step must be >= 0, got ", step);
  // name -> (place, second moment?)
  std::unordered_map<std::string, std::pair<size_t, bool>> expected;
  for (size_t i = 0; i < places_.size(); ++i) {
    expected[kExpAvg + places_[i].name] = {i, false};
    expected[kExpAvgSq + places_[i].name] = {i, true};
  }
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> seen;
  for (const auto& [name, t] : state) {
    auto it = expected.find(name);
    if (it == expected.end() || !seen.insert(name).second) {
      unexpected.push_back(name);
      continue;
    }
    const Shape& want = places_[it->second.first].param.shape();
    if (!t.defined()) {
      mismatched.push_back(name + " (undefined)");
    } else if (!dtype_is_float(t.dtype())) {
      mismatched.push_back(name + " (" + std::string(dtype_name(t.dtype())) +
                           ", expected a float dtype)");
    } else if (t.shape() != want) {
      mismatched.push_back(name + " (" + t.shape().str() + ", expected " + want.str() + ")");
    }
  }
  for (const auto& p : places_) {
    for (const std::string& prefix : {kExpAvg, kExpAvgSq})
      if (!seen.count(prefix + p.name)) missing.push_back(prefix + p.name);
  }
  nn::check_state_names("ZeroAdamW.load_full_state", missing, unexpected, mismatched);
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) given[name] = &t;
  // Bucket by bucket, so offloaded shards are held one bucket at a time.
  for (size_t b = 0; b < shards_.size(); ++b) {
    Shard& s = shards_[b];
    const std::vector<std::shared_ptr<void>> held = hold_bucket(b);
    s.exp_avg.fill(0.0);
    s.exp_avg_sq.fill(0.0);
    for (const Range& r : s.ranges) {
      const DataParallel::Place& p = places_[r.place];
      for (const bool second : {false, true}) {
        const Tensor src = given.at((second ? kExpAvgSq : kExpAvg) + p.name)->flatten();
        Tensor dst = (second ? s.exp_avg_sq : s.exp_avg).narrow(0, r.begin - s.lo, r.length);
        dst.copy_from(src.narrow(0, r.begin - p.offset, r.length));  // converts f64 -> f32 too
      }
    }
  }
  step_ = step;
}

MemoryReport ZeroAdamW::memory() const {
  MemoryReport r;
  r.dp = dp_.comm().size();
  r.stage = options_.stage;
  for (const auto& p : places_) {
    r.parameter_count += p.param.numel();
    r.param_bytes += int64_t(p.param.nbytes());
  }
  if (params_) {
    r.gathered_param_bytes = params_->gathered_bytes();
    r.param_bytes = params_->shard_bytes() + r.gathered_param_bytes;
    r.peak_gathered_bytes = params_->peak_gathered_bytes();
  }
  r.grad_bytes = dp_.gradient_bytes();
  for (const Shard& s : shards_)
    r.optimizer_bytes += int64_t(s.exp_avg.nbytes() + s.exp_avg_sq.nbytes());
  r.comm_bytes = staging_.defined() ? int64_t(staging_.nbytes()) : 0;
  if (params_) r.comm_bytes = params_->staging_bytes();
  const int64_t psi = r.parameter_count;
  r.expected_param_bytes = r.stage == 3 ? 4 * psi / r.dp : 4 * psi;
  r.expected_grad_bytes = r.stage >= 2 ? 4 * psi / r.dp : 4 * psi;
  r.expected_optimizer_bytes = 8 * psi / r.dp;
  return r;
}

NamedTensors ZeroAdamW::local_state() const {
  NamedTensors out;
  for (size_t b = 0; b < shards_.size(); ++b) {
    out.emplace_back(kExpAvg + "b" + std::to_string(b), shards_[b].exp_avg);
    out.emplace_back(kExpAvgSq + "b" + std::to_string(b), shards_[b].exp_avg_sq);
  }
  return out;
}

}  // namespace tessel::parallel
