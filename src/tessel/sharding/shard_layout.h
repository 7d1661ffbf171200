// SPDX-License-Identifier: Apache-2.0
// The placement vocabulary's refinement of Shard(dim) for parameters (placement.h): how a
// tensor-parallel style lays one parameter over the ranks of its communicator, and where a rank's
// local tensor lies in the global one. Tensor-parallel shards, checkpoint pieces and (as element
// ranges of a flat buffer) ZeRO's partitions are all described by these, so checkpoints gather
// shards to full tensors and slice full tensors back into shards whatever the layout that wrote
// them (layout-independent checkpoints).
//
// A ShardLayout splits a parameter along `dim`:
//  - plainly, by placement.h's balanced uneven rule: exactly Shard(dim) (Colwise, Rowwise);
//  - in `blocks` equal concatenated blocks, each split separately in units of `unit` rows
//    (GPT-2's fused q, k, v projection split per head: rank r holds its heads' rows of q, of k
//    and of v, in that order), which needs the units of a block divisible by the ranks;
//  - over a padded size (`padded` > `full`, Megatron-LM's vocabulary padding): equal pieces of
//    padded / ranks rows, the rows past `full` being zeros that belong to no token;
//  - with `replicate` and fewer units per block than ranks (grouped-query attention's K and V
//    projections when tp exceeds the KV heads, as vLLM and Megatron-LM forks replicate them):
//    each unit is held whole by ranks / units consecutive ranks, which needs the ranks divisible
//    by the units. The copies stay equal because their gradients are summed over the replicas,
//    and only the first rank of each group writes it to a checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessel/core/shape.h"
#include "tessel/dist/communicator.h"
#include "tessel/tensor/tensor.h"

namespace tessel::sharding {

struct ShardLayout {
  int dim = 0;
  int64_t full = 0;    // the parameter's size along dim
  int64_t padded = 0;  // 0 or full: no padding
  int64_t blocks = 1;
  int64_t unit = 1;
  bool replicate = false;  // units fewer than ranks: replicate them instead of failing

  int64_t padded_size() const { return padded > full ? padded : full; }
  // Shard(dim) exactly: no blocks, units, padding or replication.
  bool is_plain() const { return blocks == 1 && unit == 1 && padded <= full && !replicate; }
  std::string str() const;
};

// This rank's rows along dim as (start, length) ranges of the padded index space, in the order
// the local tensor holds them. Throws Error for specs the ranks cannot split.
std::vector<std::pair<int64_t, int64_t>> shard_ranges(const ShardLayout& spec, int parts, int rank);
int64_t shard_length(const ShardLayout& spec, int parts, int rank);

// How many ranks hold each piece: 1, or ranks / units for a replicated spec.
int64_t shard_replicas(const ShardLayout& spec, int parts);
// Whether `rank` is the first of the ranks holding its piece (the one that writes and counts it).
inline bool shard_leader(const ShardLayout& spec, int parts, int rank) {
  return rank % shard_replicas(spec, parts) == 0;
}

// This rank's piece of `full` (size spec.full along dim), zero rows where it covers padding.
Tensor shard_tensor(const Tensor& full, const ShardLayout& spec, int parts, int rank);
// A tensor of the shape, dtype and device of that piece, nothing written and nothing of `full`
// read: the piece of a parameter whose values are filled after the cut (construction without
// materialisation), where reading the full tensor's untouched pages would make them resident.
Tensor empty_shard(const Tensor& full, const ShardLayout& spec, int parts, int rank);

// The full tensor (size spec.full along dim, padding dropped) on every rank of `tp` from each
// rank's piece: the redistribution S -> R of a ShardLayout (regions.h's gather, then the blocks
// put back in order). Collective; not differentiable (for checkpoints and tests).
Tensor gather_tensor(const Tensor& local, const ShardLayout& spec, dist::Communicator& tp);

// Rows [local_start, local_start + length) of the local tensor along the split dim are the global
// rows [global_start, global_start + length) (every other dim whole).
struct Segment {
  int64_t local_start = 0, global_start = 0, length = 0;
};

// Where a rank's local tensor lies in its global tensor: the concatenation along `dim` of
// segments. An unsharded tensor is one segment covering it; a tensor-parallel shard one segment per
// range of shard_ranges (three for GPT-2's fused q, k, v); local rows in no segment (vocabulary
// padding) belong to no global tensor.
struct LocalLayout {
  Shape global;
  int dim = 0;
  std::vector<Segment> segments;
  // A second split, by another axis, along `block_dim` (!= dim): the local tensor holds the global
  // rows [block_start, block_start + its size) of that dim (-1: none). Expert parallelism's block
  // of experts (dim 0) around expert tensor parallelism's FFN columns (dim 1 or 2).
  int block_dim = -1;
  int64_t block_start = 0;

  // The local tensor is the whole global tensor.
  static LocalLayout whole(const Shape& shape);
  // Rank `rank` of `parts` holding a tensor of `local` shape laid out by `spec`.
  static LocalLayout of(const ShardLayout& spec, const Shape& local, int parts, int rank);
  // This layout inside `outer`, a one-segment layout along another dim (the local tensor is rows
  // [start, start + length) of outer.dim): the global shape takes outer's size along that dim.
  LocalLayout within(const LocalLayout& outer) const;
};

}  // namespace tessel::sharding
