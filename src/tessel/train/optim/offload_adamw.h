// SPDX-License-Identifier: Apache-2.0
// AdamW over chunks (ZeRO-Offload, Ren et al. 2021): the parameters, gradients and both moments
// live in chunks of a ChunkManager (docs/MEMORY.md), and the update runs where the moments live,
// in the host tier, one row of chunks at a time (the i-th parameter, gradient and moment chunks
// cover the same parameters). Each tensor is updated by the same backend adamw kernel as
// train::AdamW (OpenMP over the elements), after the same scaling pass, so the result is bitwise
// that of the in-memory optimizer; the global norm's squares come from the same multi-tensor
// kernel, summed in the trainer's parameter order, so it is bitwise the same too.
#pragma once

#include <string>
#include <vector>

#include "tessel/memory/chunk_manager.h"
#include "tessel/train/optim/adamw.h"

namespace tessel::train {

// One parameter and its state, each a view into its group's chunk; `copy` is the 16-bit compute
// copy under mixed precision (undefined otherwise), which the update rounds the master into.
struct OffloadedParameter {
  std::string name;
  Tensor param, grad, exp_avg, exp_avg_sq;
  Tensor copy;
};

class OffloadAdamW : public Optimizer {
 public:
  // `params` in the trainer's parameter order (the order of the global norm's sum); `chunks` is
  // sealed and outlives this optimizer.
  OffloadAdamW(memory::ChunkManager& chunks, std::vector<OffloadedParameter> params,
               const AdamWOptions& options);

  std::string_view name() const override { return "offloaded AdamW"; }
  // The gradients are not resident between accesses: no spans to hand out. The trainer asks
  // this optimizer for the norm's square sum and the scaling instead.
  std::vector<GradSpan> gradients() const override { return {}; }
  std::vector<GradSpan> parameter_gradients() const override { return {}; }
  // The gradients' square sum, each gradient chunk read in the host tier.
  double gradient_square_sum();
  // Each gradient as a whole span (a view of its chunk, not resident between accesses), in the
  // trainer's parameter order, for a norm over mesh axes (tensor parallelism) that reads them
  // through a hold (OffloadStrategy::gradient_hold).
  std::vector<GradSpan> gradient_spans() const;
  // Recorded and applied to each gradient chunk during step(), before its update.
  void scale_gradients(double factor) override { scale_ = factor; }
  // One update row by row in the host tier; each gradient chunk is dropped once used.
  void step(double lr) override;
  int64_t step_count() const override { return step_; }
  void set_step_count(int64_t step);  // a resumed run's (the bias correction's) step
  int64_t state_bytes() const override;
  // Drops every gradient chunk (the next backward starts from zeros); after a skipped step too.
  void drop_gradients();

 private:
  struct Row {
    int param = -1, grad = -1, exp_avg = -1, exp_avg_sq = -1;
    std::vector<size_t> members;  // into params_
  };
  memory::ChunkManager& chunks_;
  std::vector<OffloadedParameter> params_;
  std::vector<bool> decay_;
  std::vector<Row> rows_;  // by parameter chunk id
  AdamWOptions options_;
  double scale_ = 1.0;
  int64_t step_ = 0;
};

}  // namespace tessel::train
