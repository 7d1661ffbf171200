// SPDX-License-Identifier: Apache-2.0
// ZeRO's AdamW (Rajbhandari et al. 2020; parallel/zero/zero_optimizer.h: the moments, and from
// stage 2 the gradients, partitioned over the data-parallel ranks) behind the trainer's Optimizer
// interface. Its gradients are the full averaged buckets (stage 1) or this rank's shards of them.
#pragma once

#include <string>
#include <utility>

#include "tessel/parallel/zero/zero_optimizer.h"
#include "tessel/train/optim/optimizer.h"

namespace tessel::train {

class ShardedAdamW : public Optimizer {
 public:
  // As parallel::ZeroAdamW: `dp` (and `params` for stage 3) must outlive it.
  ShardedAdamW(parallel::DataParallel& dp, const parallel::ZeroOptions& options,
               parallel::Zero3Parameters* params = nullptr);

  std::string_view name() const override { return name_; }
  std::vector<GradSpan> gradients() const override;
  // Each parameter's part of the averaged buckets (stage 1) or of this rank's shards (2, 3).
  std::vector<GradSpan> parameter_gradients() const override;
  // Scales the gradients, each held through the gradient hold while it is written.
  void scale_gradients(double factor) override { scale_spans(gradients(), factor, hold_); }
  void step(double lr) override { zero_.step(lr); }
  int64_t step_count() const override { return zero_.step_count(); }
  int64_t state_bytes() const override { return zero_.memory().optimizer_bytes; }

  // Memory offload keeps the stage 2/3 gradient shards in chunks: scaling holds each of them.
  void set_gradient_hold(SpanHold hold) { hold_ = std::move(hold); }

  parallel::ZeroAdamW& zero() { return zero_; }
  const parallel::ZeroAdamW& zero() const { return zero_; }

 private:
  parallel::DataParallel& dp_;
  parallel::ZeroAdamW zero_;
  std::string name_;
  SpanHold hold_;
};

}  // namespace tessel::train
