// SPDX-License-Identifier: Apache-2.0
// The trainer's gradient norm and scaling applied to a bare parallel::ZeroAdamW (the trainer
// reaches it through train::ShardedAdamW): the square sum of its gradients, summed over dp from
// stage 2 (each rank holds a shard), and the same spans scaled in place.
#pragma once

#include <cmath>
#include <vector>

#include "tessel/parallel/zero/zero_optimizer.h"
#include "tessel/train/optim/grad_norm.h"

namespace tessel::parallel::test_util {

inline std::vector<train::GradSpan> zero_spans(const ZeroAdamW& z) {
  std::vector<train::GradSpan> spans;
  for (const Tensor& g : z.gradients()) spans.push_back(train::whole_span(g));
  return spans;
}

// The global L2 norm of the averaged gradients (collective over `dp` from stage 2).
inline double zero_grad_norm(const ZeroAdamW& z, dist::Communicator& dp) {
  std::vector<train::NormAxis> axes;
  if (z.stage() >= 2) axes.push_back({&dp, {true}});
  return std::sqrt(train::global_square_sum(zero_spans(z), 1, axes).total);
}

inline void zero_scale(const ZeroAdamW& z, double factor) {
  train::scale_spans(zero_spans(z), factor);
}

}  // namespace tessel::parallel::test_util
