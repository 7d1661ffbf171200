// SPDX-License-Identifier: Apache-2.0
// Where a rank's shard of the training state is while it is used. Memory offload
// (train/strategy/offload_strategy.h; ZeRO-Infinity's partitioned offload, Rajbhandari et al.
// 2021) keeps a rank's ZeRO shards -- parameter shards, gradient shards, the moments' shards -- in
// chunks that move between tiers: the hook makes a shard's bytes valid before it is read or
// written, and dropping the returned handle ends that use. Unset: the shards are plain memory.
#pragma once

#include <functional>
#include <memory>

#include "tessel/tensor/tensor.h"

namespace tessel::parallel {

// Gather: read by an all_gather (in the device tier). Update: read and written on the host (the
// optimizer's update, loading values, scaling gradients). Reduce: written by a gradient
// reduction (a reduce_scatter into this rank's gradient shard) on the host, where the update
// reads it. Read: only read on the host (the gradient norm, the update's gradients). Accumulate:
// written by backward and by the all_reduce over it (a data-parallel bucket's full gradient
// buffer), in the device tier, where backward runs. Discard: no use at all -- the buffer's
// contents are dead (a reduce-scattered bucket's full buffer once its reduction is retired, at
// ZeRO-2/3), so the holder may drop its bytes instead of keeping or writing them anywhere; the
// returned handle is empty.
enum class ShardUse { Gather, Update, Reduce, Read, Accumulate, Discard };
using ShardHold = std::function<std::shared_ptr<void>(const Tensor& shard, ShardUse use)>;

}  // namespace tessel::parallel
