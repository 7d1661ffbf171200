// SPDX-License-Identifier: Apache-2.0
// How a tensor-parallel style lays one parameter over the ranks of its communicator, written down
// so that checkpoints can gather shards to full tensors and slice full tensors back into shards
// whatever the layout that wrote them (layout-independent checkpoints).
//
// A parameter is split along `dim`:
//  - plainly, by sharding/placement.h's balanced uneven rule (Colwise, Rowwise);
//  - in `blocks` equal concatenated blocks, each split separately in units of `unit` rows
//    (GPT-2's fused q, k, v projection split per head: rank r holds its heads' rows of q, of k
//    and of v, in that order), which needs the units of a block divisible by the ranks;
//  - over a padded size (`padded` > `full`, Megatron-LM's vocabulary padding): equal pieces of
//    padded / ranks rows, the rows past `full` being zeros that belong to no token;
//  - with `replicate` and fewer units per block than ranks (grouped-query attention's K and V
//    projections when tp exceeds the KV heads, as vLLM and Megatron-LM forks replicate them):
//    each unit is held whole by ranks / units consecutive ranks, which needs the ranks divisible
//    by the units. The copies stay equal because their gradients are summed over the replicas
//    (replica_groups), and only the first rank of each group writes it to a checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/tensor/tensor.h"

namespace tessel::parallel {

struct ShardSpec {
  int dim = 0;
  int64_t full = 0;    // the parameter's size along dim
  int64_t padded = 0;  // 0 or full: no padding
  int64_t blocks = 1;
  int64_t unit = 1;
  bool replicate = false;  // units fewer than ranks: replicate them instead of failing

  int64_t padded_size() const { return padded > full ? padded : full; }
  std::string str() const;
};

// This rank's rows along dim as (start, length) ranges of the padded index space, in the order
// the local tensor holds them. Throws Error for specs the ranks cannot split.
std::vector<std::pair<int64_t, int64_t>> shard_ranges(const ShardSpec& spec, int parts, int rank);
int64_t shard_length(const ShardSpec& spec, int parts, int rank);

// How many ranks hold each piece: 1, or ranks / units for a replicated spec.
int64_t shard_replicas(const ShardSpec& spec, int parts);
// Whether `rank` is the first of the ranks holding its piece (the one that writes and counts it).
inline bool shard_leader(const ShardSpec& spec, int parts, int rank) {
  return rank % shard_replicas(spec, parts) == 0;
}

// This rank's piece of `full` (size spec.full along dim), zero rows where it covers padding.
Tensor shard_tensor(const Tensor& full, const ShardSpec& spec, int parts, int rank);

// The full tensor (size spec.full along dim, padding dropped) on every rank of `tp` from each
// rank's piece. Collective; not differentiable (for checkpoints and tests).
Tensor gather_tensor(const Tensor& local, const ShardSpec& spec, dist::Communicator& tp);

}  // namespace tessel::parallel
