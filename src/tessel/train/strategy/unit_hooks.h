// SPDX-License-Identifier: Apache-2.0
// When each unit of a model computes, as memory offload holds a unit's chunks (PatrickStar's
// chunk-wise access, Fang et al. 2021; the spans ZeRO-3 gathers over): a unit's forward runs from
// its module's pre-hook to its post-hook (a nested call of the same module ignored); its backward
// from the moment backward reaches the unit's output (an identity node recorded there) until the
// last of the unit's parameters has its gradient ready, or until the step's backward ends
// (end_backwards) for a unit some of whose gradients never come. OffloadStrategy holds chunks
// over these spans; the planner's recorder of a pipeline rank (cli/offload_record.cpp) writes the
// same spans down on the meta device, so both follow one set of rules.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/nn/module.h"
#include "tessel/tensor/tensor.h"

namespace tessel::train {

class UnitHooks {
 public:
  // Told of each unit's spans by its index in the units given.
  struct Listener {
    virtual ~Listener() = default;
    virtual void forward_begin(size_t unit) = 0;
    virtual void forward_end(size_t unit) = 0;
    virtual void backward_begin(size_t unit) = 0;
    virtual void backward_end(size_t unit) = 0;
  };
  struct Unit {
    nn::Module* module = nullptr;  // null: no forward hooks (its backward still ends by gradient)
    std::vector<Tensor> params;    // the leaves whose grad-ready hooks end its backward
  };

  // Installs the hooks; `listener` must outlive this object and every graph recorded under it.
  UnitHooks(std::vector<Unit> units, Listener& listener);
  ~UnitHooks();  // removes the hooks
  UnitHooks(const UnitHooks&) = delete;
  UnitHooks& operator=(const UnitHooks&) = delete;

  // Ends the backward span of every unit still in one (gradients that never came this step).
  void end_backwards();

 private:
  struct State {
    Unit unit;
    int64_t pre_hook = 0, post_hook = 0;
    int64_t pending_grads = 0;
    bool in_forward = false, in_backward = false;
  };
  friend class UnitBackwardNode;
  void on_pre_forward(size_t k);
  void on_post_forward(size_t k, Tensor& output);
  void on_backward(size_t k);
  void on_grad_ready(size_t k);
  void end_backward(size_t k);

  Listener& listener_;
  std::vector<State> units_;
  std::vector<std::pair<Tensor, int64_t>> grad_hooks_;
};

}  // namespace tessel::train
