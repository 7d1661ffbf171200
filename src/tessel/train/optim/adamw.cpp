// SPDX-License-Identifier: Apache-2.0
// AdamW (Loshchilov & Hutter 2019) over named parameters: the bookkeeping (groups, moments, step
// count, saved state). The arithmetic is the kernel backend's adamw of each parameter's device,
// looked up as the ops do, so a BackendScope can swap in the reference backend.
#include "tessel/train/optim/adamw.h"

#include <cmath>
#include <set>
#include <unordered_map>

#include "tessel/autograd/backend_scope.h"
#include "tessel/core/error.h"
#include "tessel/kernels/backend.h"
#include "tessel/nn/module.h"

namespace tessel::train {

namespace {

const std::string kExpAvg = "exp_avg.";
const std::string kExpAvgSq = "exp_avg_sq.";

// "f32, f64": the dtypes `backend` runs adamw in, for error messages.
std::string supported_dtypes(const kernels::Backend& backend) {
  std::string out;
  for (DType d : kAllDTypes) {
    if (!dtype_is_float(d) || !backend.supports(kernels::Op::AdamW, d)) continue;
    out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
  }
  return out;
}

}  // namespace

AdamW::AdamW(NamedTensors params, const AdamWOptions& options)
    : params_(std::move(params)), options_(options) {
  const AdamWOptions& o = options_;
  kernels::check_adamw_hyperparameters("AdamW", o.beta1, o.beta2, o.eps, o.weight_decay);
  std::set<std::string> names;
  exp_avg_.reserve(params_.size());
  exp_avg_sq_.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    TESSEL_CHECK(p.defined(), "AdamW: parameter '", name, "' is an undefined tensor");
    TESSEL_CHECK(names.insert(name).second, "AdamW: parameter name '", name,
                 "' appears twice; every parameter needs its own name");
    for (size_t j = 0; j < i; ++j) {
      TESSEL_CHECK(!params_[j].second.is_same(p), "AdamW: parameters '", params_[j].first,
                   "' and '", name, "' are the same tensor");
    }
    kernels::Backend& backend = autograd::backend_for(p.device());
    TESSEL_CHECK(dtype_is_float(p.dtype()) && backend.supports(kernels::Op::AdamW, p.dtype()),
                 "AdamW: parameter '", name, "' is ", dtype_name(p.dtype()),
                 ", expected a float dtype that the ", backend.name(), " backend's adamw runs (",
                 supported_dtypes(backend), ")");
    TESSEL_CHECK(p.requires_grad(), "AdamW: parameter '", name, "' ", p.shape(),
                 " does not require grad; pass only trainable parameters");
    const DType stat = kernels::stat_dtype(p.dtype());
    exp_avg_.push_back(zeros(p.shape(), stat, p.device()));
    exp_avg_sq_.push_back(zeros(p.shape(), stat, p.device()));
    decay_.push_back(decays(name, p.shape()));
  }
}

bool AdamW::decays(const std::string& /*name*/, const Shape& shape) {
  return kernels::adamw_decays(shape);
}

int64_t AdamW::decay_count() const {
  int64_t n = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    if (decay_[i]) n += params_[i].second.numel();
  return n;
}

int64_t AdamW::no_decay_count() const {
  int64_t n = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!decay_[i]) n += params_[i].second.numel();
  return n;
}

std::vector<GradSpan> AdamW::gradients() const {
  std::vector<GradSpan> spans;
  for (const auto& [name, p] : params_)
    if (p.grad().defined()) spans.push_back(whole_span(p.grad()));
  return spans;
}

std::vector<GradSpan> AdamW::parameter_gradients() const {
  std::vector<GradSpan> spans;
  for (const auto& [name, p] : params_)
    if (p.grad().defined()) spans.push_back(whole_span(p.grad(), 0, name));
  return spans;
}

void AdamW::step(double lr) {
  TESSEL_CHECK(std::isfinite(lr) && lr >= 0, "AdamW.step: lr must be finite and >= 0, got ", lr);
  // Every gradient is checked before any parameter changes, so a bad one leaves the model and
  // the moments as they were.
  for (const auto& [name, p] : params_) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    TESSEL_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype(), "AdamW.step: the gradient of '",
                 name, "' is ", dtype_name(g.dtype()), " ", g.shape(), ", expected ",
                 dtype_name(p.dtype()), " ", p.shape(), " (the parameter's)");
  }
  ++step_;
  kernels::AdamWParams h{lr, options_.beta1, options_.beta2, options_.eps, 0.0, step_};
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    h.weight_decay = decay_[i] ? options_.weight_decay : 0.0;
    autograd::backend_for(p.device()).adamw(p, g, exp_avg_[i], exp_avg_sq_[i], h);
  }
}

NamedTensors AdamW::state() const {
  // The moment tensors themselves, not copies: a checkpoint writer reads them once, and copying
  // the largest state of a run (twice the parameters) just to save it would double its peak.
  NamedTensors out;
  out.reserve(2 * params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    out.emplace_back(kExpAvg + params_[i].first, exp_avg_[i]);
  for (size_t i = 0; i < params_.size(); ++i)
    out.emplace_back(kExpAvgSq + params_[i].first, exp_avg_sq_[i]);
  return out;
}

void AdamW::load_state(const NamedTensors& state, int64_t step) {
  TESSEL_CHECK(step >= 0, "AdamW.load_state: step must be >= 0, got ", step);
  std::unordered_map<std::string, Tensor*> slots;  // expected name -> moment to fill
  for (size_t i = 0; i < params_.size(); ++i) {
    slots[kExpAvg + params_[i].first] = &exp_avg_[i];
    slots[kExpAvgSq + params_[i].first] = &exp_avg_sq_[i];
  }
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> seen;
  for (const auto& [name, t] : state) {
    auto it = slots.find(name);
    if (it == slots.end() || !seen.insert(name).second) {
      unexpected.push_back(name);
    } else if (!t.defined()) {
      mismatched.push_back(name + " (undefined)");
    } else if (!dtype_is_float(t.dtype())) {
      mismatched.push_back(name + " (" + std::string(dtype_name(t.dtype())) +
                           ", expected a float dtype)");
    } else if (t.shape() != it->second->shape()) {
      mismatched.push_back(name + " (" + t.shape().str() + ", expected " +
                           it->second->shape().str() + ")");
    }
  }
  for (const auto& [name, p] : params_) {
    for (const std::string& prefix : {kExpAvg, kExpAvgSq})
      if (!seen.count(prefix + name)) missing.push_back(prefix + name);
  }
  nn::check_state_names("AdamW.load_state", missing, unexpected, mismatched);
  // All names checked: copy (converting dtype if the saved moments differ, e.g. f64 -> f32).
  for (const auto& [name, t] : state) slots.at(name)->copy_from(t);
  step_ = step;
}

void AdamW::set_step_count(int64_t step) {
  TESSEL_CHECK(step >= 0, "AdamW.set_step_count: step must be >= 0, got ", step);
  step_ = step;
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    bytes += int64_t(exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes());
  return bytes;
}

}  // namespace tessel::train
