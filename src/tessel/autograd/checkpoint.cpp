// SPDX-License-Identifier: Apache-2.0
// CheckpointBackward: saves the block's inputs and the generator states; its backward recomputes
// the block with recording on and runs a nested backward from the recomputed outputs.
#include "tessel/autograd/checkpoint.h"

#include <utility>

#include "tessel/autograd/engine.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/autograd/meta.h"

namespace tessel::autograd {

namespace {

using GeneratorStates = std::vector<std::pair<uint64_t, uint64_t>>;

GeneratorStates capture(const std::vector<Generator*>& generators) {
  GeneratorStates states;
  for (Generator* g : generators) states.emplace_back(g->seed(), g->offset());
  return states;
}

void restore(const std::vector<Generator*>& generators, const GeneratorStates& states) {
  for (size_t i = 0; i < generators.size(); ++i)
    generators[i]->set_state(states[i].first, states[i].second);
}

class CheckpointBackward final : public Node {
 public:
  CheckpointBackward(CheckpointFn fn, const std::vector<Tensor>& inputs,
                     std::vector<Generator*> generators, GeneratorStates states)
      : fn_(std::move(fn)), generators_(std::move(generators)), states_(std::move(states)) {
    for (const Tensor& t : inputs) {
      inputs_.push_back(saved(t));
      input_requires_grad_.push_back(t.defined() && t.requires_grad());
    }
  }

  std::string_view name() const override { return "CheckpointBackward"; }

  void release_saved() override {
    inputs_.clear();
    fn_ = nullptr;
  }

  std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> leaves;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      Tensor t = inputs_[i].defined() ? inputs_[i].detach() : Tensor();
      if (input_requires_grad_[i]) t.set_requires_grad(true);
      leaves.push_back(t);
    }
    GeneratorStates now = capture(generators_);
    restore(generators_, states_);
    std::vector<Tensor> outputs;
    {
      GradModeGuard recording(true);
      outputs = fn_(leaves);
    }
    restore(generators_, now);

    TESSEL_CHECK(outputs.size() == num_outputs(), "checkpoint: the recomputation returned ",
                 outputs.size(), " outputs, the first run ", num_outputs());
    std::vector<Tensor> roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const TensorMeta& m = output_meta(i);
      TESSEL_CHECK(outputs[i].shape() == m.shape && outputs[i].dtype() == m.dtype,
                   "checkpoint: recomputed output ", i, " is ", outputs[i].shape(), " ",
                   dtype_name(outputs[i].dtype()), ", the first run gave ", m.shape, " ",
                   dtype_name(m.dtype));
      if (outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(std::move(grad_outputs[i]));
      }
    }
    grad_outputs.clear();
    if (!roots.empty()) backward(roots, root_grads);

    std::vector<Tensor> input_grads(leaves.size());
    for (size_t i = 0; i < leaves.size(); ++i)
      if (input_requires_grad_[i]) input_grads[i] = leaves[i].grad();
    return input_grads;
  }

 private:
  CheckpointFn fn_;
  std::vector<Tensor> inputs_;
  std::vector<bool> input_requires_grad_;
  std::vector<Generator*> generators_;
  GeneratorStates states_;
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Generator*>& generators) {
  TESSEL_CHECK(fn != nullptr, "checkpoint: no function given");
  std::vector<Generator*> all{&default_generator()};
  for (Generator* g : generators) {
    TESSEL_CHECK(g != nullptr, "checkpoint: null generator");
    if (g != &default_generator()) all.push_back(g);
  }
  GeneratorStates states = capture(all);
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  // Parameters used inside fn are invisible here, so the block is recorded whenever grad mode is
  // on, even when no input requires grad.
  if (!grad_enabled()) return outputs;
  for (Tensor& out : outputs) {
    TESSEL_CHECK(out.defined(), "checkpoint: fn returned an undefined tensor");
    out = out.detach();  // a fresh handle: fn may return one of its inputs
  }
  auto node = std::make_shared<CheckpointBackward>(fn, inputs, std::move(all), std::move(states));
  record(node, inputs, outputs);
  return outputs;
}

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                  const std::vector<Tensor>& inputs, const std::vector<Generator*>& generators) {
  TESSEL_CHECK(fn != nullptr, "checkpoint: no function given");
  CheckpointFn wrapped = [fn](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{fn(in)};
  };
  return checkpoint(wrapped, inputs, generators)[0];
}

}  // namespace tessel::autograd
