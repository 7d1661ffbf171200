// SPDX-License-Identifier: Apache-2.0
// UnitHooks: module pre/post hooks for a unit's forward, an identity node at its output for the
// start of its backward, grad-ready hooks on its parameters for the end.
#include "tessel/train/strategy/unit_hooks.h"

#include "tessel/autograd/meta.h"
#include "tessel/autograd/node.h"

namespace tessel::train {

// The identity a unit's output passes through while recording: its backward runs before the
// backward of the unit's module, so the unit's backward span starts there (as ZeRO-3's gather
// node brings a unit's parameters in).
class UnitBackwardNode final : public autograd::Node {
 public:
  UnitBackwardNode(UnitHooks* owner, size_t unit) : owner_(owner), unit_(unit) {}
  std::string_view name() const override { return "offload_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    owner_->on_backward(unit_);
    return {grads[0]};
  }

 private:
  UnitHooks* owner_;  // outlives the graphs it records (its owner keeps both)
  size_t unit_;
};

UnitHooks::UnitHooks(std::vector<Unit> units, Listener& listener) : listener_(listener) {
  units_.resize(units.size());
  for (size_t k = 0; k < units.size(); ++k) units_[k].unit = std::move(units[k]);
  for (size_t k = 0; k < units_.size(); ++k) {
    State& s = units_[k];
    for (const Tensor& p : s.unit.params)
      grad_hooks_.emplace_back(
          p, autograd::register_grad_ready_hook(p, [this, k](const Tensor&) { on_grad_ready(k); }));
    if (s.unit.module == nullptr) continue;
    s.pre_hook = s.unit.module->register_forward_pre_hook(
        [this, k](nn::Module&, const std::vector<Tensor>&) { on_pre_forward(k); });
    s.post_hook =
        s.unit.module->register_forward_hook([this, k](nn::Module&, const std::vector<Tensor>&,
                                                       Tensor& out) { on_post_forward(k, out); });
  }
}

UnitHooks::~UnitHooks() {
  for (State& s : units_) {
    try {
      if (s.unit.module != nullptr) {
        s.unit.module->remove_hook(s.pre_hook);
        s.unit.module->remove_hook(s.post_hook);
      }
    } catch (...) {  // a destructor must not throw
    }
  }
  for (auto& [param, handle] : grad_hooks_) {
    try {
      autograd::remove_grad_ready_hook(param, handle);
    } catch (...) {
    }
  }
}

void UnitHooks::on_pre_forward(size_t k) {
  State& s = units_[k];
  if (s.in_forward) return;  // a nested call of the same module
  listener_.forward_begin(k);
  s.in_forward = true;
}

void UnitHooks::on_post_forward(size_t k, Tensor& output) {
  State& s = units_[k];
  if (!s.in_forward) return;
  if (output.defined() && autograd::needs_grad({output})) {
    Tensor y = output.detach();
    autograd::record(std::make_shared<UnitBackwardNode>(this, k), {output}, {y});
    output = y;
  }
  listener_.forward_end(k);
  s.in_forward = false;
}

void UnitHooks::on_backward(size_t k) {
  State& s = units_[k];
  if (s.in_backward) return;
  listener_.backward_begin(k);
  s.in_backward = true;
  s.pending_grads = int64_t(s.unit.params.size());
}

void UnitHooks::on_grad_ready(size_t k) {
  State& s = units_[k];
  if (!s.in_backward || --s.pending_grads > 0) return;
  end_backward(k);
}

void UnitHooks::end_backward(size_t k) {
  listener_.backward_end(k);
  units_[k].in_backward = false;
}

void UnitHooks::end_backwards() {
  for (size_t k = 0; k < units_.size(); ++k)
    if (units_[k].in_backward) end_backward(k);
}

}  // namespace tessel::train
