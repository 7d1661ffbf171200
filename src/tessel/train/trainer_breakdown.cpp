// SPDX-License-Identifier: Apache-2.0
// The step's breakdown on a composed layout (data x tensor x pipeline parallelism, the 3D
// parallelism of Narayanan et al., SC 2021): compute, the exposed communication of each axis, and
// the pipeline's bubble, as the slowest rank's figures (a max over every axis), so that rank 0
// reports the grid. Compute is the forward + backward (the pipeline's compute actions under pp)
// less the blocking tp collectives inside it; tp is every blocking tp call of the step (in the
// layers, the sequence-parallel sums, the norm).
#include <chrono>

#include "tessel/dist/comm_time.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

double Trainer::blocking_ms(const dist::CommPtr& axis) const {
  return axis ? dist::blocking_ms(axis->label()) : 0.0;
}

void Trainer::breakdown_begin() {
  mark_start_ms_ = now_ms();
  mark_tp_ms_ = blocking_ms(layout_.tp);
  mark_dp_ms_ = blocking_ms(dp_);
}

void Trainer::breakdown_after_backward() {
  fb_ms_ = now_ms() - mark_start_ms_;
  tp_fb_ms_ = blocking_ms(layout_.tp) - mark_tp_ms_;
}

void Trainer::breakdown(StepRecord& r) {
  const double tp_ms = blocking_ms(layout_.tp) - mark_tp_ms_;
  // dp: the wait for the overlapped gradient reduction, and every blocking dp call (ZeRO's
  // parameter all-gathers, the norm, the loss mean).
  const double dp_ms = r.comm_wait_ms + blocking_ms(dp_) - mark_dp_ms_;
  double bubble = 0, compute = fb_ms_;
  if (pipeline_ && pipeline_->last()) {
    compute = pipeline_->last()->compute_ms;
    bubble = std::max(0.0, pipeline_->last()->makespan_ms - compute);
  }
  compute = std::max(0.0, compute - tp_fb_ms_);
  Tensor t = from_data(std::vector<double>{compute, dp_ms, tp_ms, bubble}, {4});
  for (const dist::CommPtr& axis : {layout_.dp, layout_.tp, layout_.pp})
    if (axis) axis->all_reduce(t, dist::ReduceOp::Max);
  const double* v = t.data<double>();
  r.compute_ms = v[0];
  r.dp_comm_ms = v[1];
  r.tp_comm_ms = v[2];
  r.pp_bubble_ms = v[3];
}

}  // namespace tessel::train
