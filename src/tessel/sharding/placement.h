// SPDX-License-Identifier: Apache-2.0
// Placement: how a tensor lies along one axis of a device mesh (the abstraction of GSPMD and
// PyTorch's DTensor): Replicate (every rank holds all of it), Shard(dim) (each rank holds one
// piece along `dim`) or Partial (each rank holds a full-shaped addend; the tensor is their sum).
//
// The uneven rule (one rule, used everywhere): a dim of size n split over k ranks gives rank r
//   size(r)   = n / k + (r < n % k ? 1 : 0)
//   offset(r) = r * (n / k) + min(r, n % k)
// i.e. balanced pieces, the first n % k ranks one element longer (7 over 3: 3, 2, 2; 13 over 4:
// 4, 3, 3, 3). No piece is empty unless n < k. This is the balanced split of Megatron-LM's
// sequence/vocabulary partitioning helpers, not torch.chunk's ceil(n / k) rule.
//
// Parameters that a tensor-parallel style splits in blocks, by heads, over a padded size or with
// replicated units refine Shard(dim) as a ShardLayout (shard_layout.h), which also says where a
// rank's local tensor lies in the global one (checkpoint pieces).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/shape.h"

namespace tessel::sharding {

enum class PlacementKind : uint8_t { Replicate, Shard, Partial };

// Partial is always a pending sum (the only reduction the runtime uses for placements).
struct Placement {
  PlacementKind kind = PlacementKind::Replicate;
  int dim = 0;  // Shard only: the tensor dim that is split (non-negative)

  static Placement replicate() { return {PlacementKind::Replicate, 0}; }
  static Placement shard(int dim) { return {PlacementKind::Shard, dim}; }
  static Placement partial() { return {PlacementKind::Partial, 0}; }
  // "R", "S(1)", "P"; parse() accepts exactly these forms and throws Error otherwise.
  static Placement parse(std::string_view text);

  bool is_replicate() const { return kind == PlacementKind::Replicate; }
  bool is_shard() const { return kind == PlacementKind::Shard; }
  bool is_shard(int d) const { return is_shard() && dim == d; }
  bool is_partial() const { return kind == PlacementKind::Partial; }
  std::string str() const;

  friend bool operator==(const Placement& a, const Placement& b) {
    return a.kind == b.kind && (a.kind != PlacementKind::Shard || a.dim == b.dim);
  }
};

using Placements = std::vector<Placement>;

// "[S(0), R]".
std::string str(std::span<const Placement> placements);

// The uneven rule above; parts >= 1, 0 <= index < parts, n >= 0.
int64_t shard_size(int64_t n, int parts, int index);
int64_t shard_offset(int64_t n, int parts, int index);
// Every piece's size, in rank order.
std::vector<int64_t> shard_sizes(int64_t n, int parts);

// Throws Error unless every Shard dim lies inside a tensor of `ndim` dims and `placements` has one
// entry per axis of `mesh_sizes`.
void check_placements(std::span<const Placement> placements, int ndim,
                      std::span<const int> mesh_sizes);

// The shape this rank holds of a tensor of `global` shape. Axes are applied in order, so a dim
// sharded by two axes is split by the first, then that piece by the second (DTensor's rule).
Shape local_shape(const Shape& global, std::span<const Placement> placements,
                  std::span<const int> mesh_sizes, std::span<const int> coords);
// Where this rank's piece starts in each dim of the global tensor.
std::vector<int64_t> local_offset(const Shape& global, std::span<const Placement> placements,
                                  std::span<const int> mesh_sizes, std::span<const int> coords);

}  // namespace tessel::sharding
