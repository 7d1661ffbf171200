// SPDX-License-Identifier: Apache-2.0
// One axis of a training layout as the step sees it: data parallelism (with ZeRO), tensor
// parallelism, pipeline parallelism, mixed precision, and later expert parallelism and offload.
// The trainer keeps a list of the axes a run has (an absent axis is not in the list) and calls the
// same few hooks on each, in list order, at fixed points of the step (docs/TRAINING.md, "The step
// and its strategies"):
//
//   begin_step -> per micro-batch: micro_batch_scope, loss_for_backward, before_backward,
//   after_backward -> sync_gradients -> describe_norm -> skip_update -> (optimizer) ->
//   after_update -> record
//
// A hook an axis does not need keeps its default (nothing). The list order is the order of the
// gradient synchronisation, which is the one place where the order between axes matters.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/tensor/tensor.h"
#include "tessel/train/metrics/metrics.h"
#include "tessel/train/optim/grad_norm.h"

namespace tessel::train {

// What the global gradient norm is computed over (grad_norm.h): this rank's gradient spans, one
// per parameter part it holds (from the optimizer), the sharing groups, and the mesh axes whose
// ranks hold other parts. Axes describe themselves in describe_norm.
struct GradNormPlan {
  std::vector<GradSpan> spans;  // GradSpan::param names the parameter
  int groups = 1;
  struct Axis {
    dist::Communicator* comm = nullptr;
    std::vector<bool> sums;  // per group; empty: every group's squares add over this axis
  };
  std::vector<Axis> axes;

  // The axes as global_square_sum takes them (empty `sums` expanded to every group).
  std::vector<NormAxis> norm_axes() const;
};

class AxisStrategy {
 public:
  virtual ~AxisStrategy() = default;
  // For the run's first lines and errors: "data parallel (dp 2, ZeRO-3)".
  virtual std::string name() const = 0;

  // The step begins (the model's gradients are zero): timing marks, peak counters.
  virtual void begin_step() {}
  // One micro-batch of the plain loop (the pipeline axis runs its own schedule of them): what
  // holds while its forward and backward run, the loss its backward starts from, and the two
  // sides of the backward (`last`: the step's last micro-batch).
  virtual std::shared_ptr<void> micro_batch_scope() { return nullptr; }
  virtual Tensor loss_for_backward(const Tensor& loss) { return loss; }
  virtual void before_backward(bool last) { (void)last; }
  virtual void after_backward() {}
  // Every backward of the step has run: this axis's gradient synchronisation.
  virtual void sync_gradients(StepRecord& record) { (void)record; }
  // How this axis shares the gradient, for the one global norm.
  virtual void describe_norm(GradNormPlan& plan) const { (void)plan; }
  // The norm (and loss) are in `record`; `local_nonfinite`: this rank's own gradients hold an
  // inf or NaN. True when this axis requires the update to be skipped (every rank of every axis
  // must then agree).
  virtual bool skip_update(StepRecord& record, bool local_nonfinite) {
    (void)record;
    (void)local_nonfinite;
    return false;
  }
  // The parameters have been updated: what other ranks need before the next step.
  virtual void after_update() {}
  // The step's figures this axis measures.
  virtual void record(StepRecord& record) { (void)record; }
};

}  // namespace tessel::train
