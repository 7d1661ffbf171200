// SPDX-License-Identifier: Apache-2.0
// ZeRO's AdamW as an Optimizer.
#include "tessel/train/optim/sharded_adamw.h"

#include <algorithm>

namespace tessel::train {

ShardedAdamW::ShardedAdamW(parallel::DataParallel& dp, const parallel::ZeroOptions& options,
                           parallel::Zero3Parameters* params)
    : dp_(dp),
      zero_(dp, options, params),
      name_("ZeRO-" + std::to_string(options.stage) + " AdamW") {}

std::vector<GradSpan> ShardedAdamW::gradients() const {
  std::vector<GradSpan> spans;
  for (const Tensor& g : zero_.gradients()) spans.push_back(whole_span(g));
  return spans;
}

std::vector<GradSpan> ShardedAdamW::parameter_gradients() const {
  std::vector<GradSpan> spans;
  for (const parallel::DataParallel::Place& p : dp_.places()) {
    const int64_t n = p.param.numel();
    if (zero_.stage() == 1) {  // the full average on every dp rank
      spans.push_back({dp_.bucket_gradients(p.bucket), p.offset, p.offset + n, 0, p.name});
      continue;
    }
    // Stage 2 and 3: this rank's block of the bucket, where it overlaps the parameter.
    const int64_t size = dp_.shard_numel(p.bucket);
    const int64_t lo = int64_t(dp_.comm().rank()) * size;
    const int64_t begin = std::max(lo, p.offset), end = std::min(lo + size, p.offset + n);
    if (begin < end)
      spans.push_back({dp_.gradient_shard(p.bucket), begin - lo, end - lo, 0, p.name});
  }
  return spans;
}

}  // namespace tessel::train
