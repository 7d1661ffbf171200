// SPDX-License-Identifier: Apache-2.0
// ZeRO's AdamW as an Optimizer.
#include "tessel/train/optim/sharded_adamw.h"

namespace tessel::train {

ShardedAdamW::ShardedAdamW(parallel::DataParallel& dp, const parallel::ZeroOptions& options,
                           parallel::Zero3Parameters* params)
    : zero_(dp, options, params), name_("ZeRO-" + std::to_string(options.stage) + " AdamW") {}

std::vector<GradSpan> ShardedAdamW::gradients() const {
  std::vector<GradSpan> spans;
  for (const Tensor& g : zero_.gradients()) spans.push_back(whole_span(g));
  return spans;
}

}  // namespace tessel::train
