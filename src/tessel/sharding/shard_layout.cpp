// SPDX-License-Identifier: Apache-2.0
// Shard layouts: which rows of a parameter a rank holds, where they lie in the global tensor, and
// the slice / gather between full tensors and pieces that layout-independent checkpoints rely on.
#include "tessel/sharding/shard_layout.h"

#include <algorithm>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/sharding/placement.h"
#include "tessel/sharding/regions.h"
#include "tessel/tensor/unallocated.h"

namespace tessel::sharding {

std::string ShardLayout::str() const {
  std::string s = "S(" + std::to_string(dim) + ") of " + std::to_string(full);
  if (padded > full) s += " padded to " + std::to_string(padded);
  if (blocks > 1)
    s += " in " + std::to_string(blocks) + " blocks of units of " + std::to_string(unit);
  else if (unit > 1)
    s += " in units of " + std::to_string(unit);
  if (replicate) s += ", units replicated when fewer than the ranks";
  return s;
}

std::vector<std::pair<int64_t, int64_t>> shard_ranges(const ShardLayout& s, int parts, int rank) {
  TESSEL_CHECK(
      parts >= 1 && rank >= 0 && rank < parts && s.full >= 0 && s.blocks >= 1 && s.unit >= 1,
      "shard_ranges: ", s.str(), " over ", parts, " ranks (rank ", rank, ")");
  if (s.padded > s.full) {
    TESSEL_CHECK(s.blocks == 1 && s.padded % parts == 0, "shard_ranges: ", s.str(),
                 " must be one block whose padded size divides by the ", parts, " ranks");
    const int64_t len = s.padded / parts;
    return {{rank * len, len}};
  }
  if (s.blocks == 1 && s.unit == 1)
    return {{shard_offset(s.full, parts, rank), shard_size(s.full, parts, rank)}};
  TESSEL_CHECK(s.full % s.blocks == 0 && (s.full / s.blocks) % s.unit == 0,
               "shard_ranges: ", s.str(), ": the size is not blocks x whole units");
  const int64_t block = s.full / s.blocks, units = block / s.unit;
  std::vector<std::pair<int64_t, int64_t>> out;
  if (s.replicate && units < parts) {
    TESSEL_CHECK(parts % units == 0, "shard_ranges: ", units, " units of ", s.unit,
                 " rows per block cannot be replicated evenly over ", parts,
                 " tensor-parallel ranks (the ranks must be a multiple of the units)");
    const int64_t u = rank / (parts / units);
    for (int64_t b = 0; b < s.blocks; ++b) out.emplace_back(b * block + u * s.unit, s.unit);
    return out;
  }
  TESSEL_CHECK(units % parts == 0, "shard_ranges: ", units, " units of ", s.unit,
               " rows per block do not divide by the ", parts, " tensor-parallel ranks");
  const int64_t per = units / parts * s.unit;
  for (int64_t b = 0; b < s.blocks; ++b) out.emplace_back(b * block + rank * per, per);
  return out;
}

int64_t shard_length(const ShardLayout& spec, int parts, int rank) {
  int64_t n = 0;
  for (const auto& [start, len] : shard_ranges(spec, parts, rank)) n += len;
  return n;
}

int64_t shard_replicas(const ShardLayout& s, int parts) {
  if (!s.replicate || s.padded > s.full || s.unit < 1 || s.blocks < 1) return 1;
  const int64_t units = s.full / s.blocks / s.unit;
  return units >= 1 && units < parts && parts % units == 0 ? parts / units : 1;
}

Tensor shard_tensor(const Tensor& full, const ShardLayout& s, int parts, int rank) {
  TESSEL_CHECK(full.defined() && s.dim >= 0 && s.dim < full.ndim() && full.size(s.dim) == s.full,
               "shard_tensor: tensor ", full.defined() ? full.shape().str() : "undefined",
               " does not match ", s.str());
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> pieces;
  for (const auto& [start, len] : shard_ranges(s, parts, rank)) {
    const int64_t real = std::max<int64_t>(0, std::min(start + len, s.full) - start);
    if (real > 0) pieces.push_back(full.detach().slice(s.dim, start, start + real));
    if (real < len) {
      Shape pad = full.shape();
      pad[s.dim] = len - real;
      pieces.push_back(zeros(pad, full.dtype()));
    }
  }
  return pieces.size() == 1 ? pieces[0].clone() : concat(pieces, s.dim);
}

Tensor empty_shard(const Tensor& full, const ShardLayout& s, int parts, int rank) {
  TESSEL_CHECK(full.defined() && s.dim >= 0 && s.dim < full.ndim() && full.size(s.dim) == s.full,
               "empty_shard: tensor ", full.defined() ? full.shape().str() : "undefined",
               " does not match ", s.str());
  Shape shape = full.shape();
  shape[s.dim] = shard_length(s, parts, rank);
  // A shape-only tensor (construction without materialisation) gives a shape-only piece: the
  // rank materialises it only if it holds it (a pipeline stage holds only its own stages').
  if (full.device().is_cpu() && !full.storage().is_materialized())
    return unallocated(shape, full.dtype());
  return empty(shape, full.dtype(), full.device());
}

Tensor gather_tensor(const Tensor& local, const ShardLayout& s, dist::Communicator& tp) {
  const int k = tp.size();
  TESSEL_CHECK(local.defined() && s.dim >= 0 && s.dim < local.ndim() &&
                   local.size(s.dim) == shard_length(s, k, tp.rank()),
               "gather_tensor: piece ", local.defined() ? local.shape().str() : "undefined",
               " is not rank ", tp.rank(), "'s piece of ", s.str());
  autograd::NoGradGuard no_grad;
  int64_t total = 0;
  std::vector<int64_t> starts;  // where each rank's piece starts in the gathered tensor
  for (int r = 0; r < k; ++r) {
    starts.push_back(total);
    total += shard_length(s, k, r);
  }
  Tensor all = k == 1 ? local.detach() : gather_from_region(local.detach(), tp, s.dim, total);
  if (s.padded > s.full) return all.slice(s.dim, 0, s.full).clone();
  const int64_t replicas = shard_replicas(s, k);
  if (s.blocks == 1 && replicas == 1) return all.clone();
  // Rank-major (q0 k0 v0 q1 k1 v1 ...) back to block-major (q0 q1 .. k0 k1 .. v0 v1 ..), one
  // copy of each replicated unit.
  std::vector<Tensor> pieces;
  for (int64_t b = 0; b < s.blocks; ++b) {
    for (int r = 0; r < k; r += int(replicas)) {
      const auto ranges = shard_ranges(s, k, r);
      int64_t at = starts[size_t(r)];
      for (int64_t i = 0; i < b; ++i) at += ranges[size_t(i)].second;
      pieces.push_back(all.slice(s.dim, at, at + ranges[size_t(b)].second));
    }
  }
  return concat(pieces, s.dim);
}

LocalLayout LocalLayout::whole(const Shape& shape) {
  LocalLayout p;
  p.global = shape;
  p.dim = 0;
  p.segments.push_back({0, 0, shape.ndim() > 0 ? shape[0] : 1});
  return p;
}

LocalLayout LocalLayout::of(const ShardLayout& spec, const Shape& local, int parts, int rank) {
  TESSEL_CHECK(spec.dim >= 0 && spec.dim < local.ndim(), "LocalLayout: ", spec.str(),
               " for a local tensor of shape ", local);
  LocalLayout p;
  p.dim = spec.dim;
  std::vector<int64_t> dims(local.dims().begin(), local.dims().end());
  dims[size_t(spec.dim)] = spec.full;
  p.global = Shape(dims);
  int64_t at = 0;
  for (const auto& [start, len] : shard_ranges(spec, parts, rank)) {
    const int64_t real = std::max<int64_t>(0, std::min(start + len, spec.full) - start);
    if (real > 0) p.segments.push_back({at, start, real});
    at += len;
  }
  return p;
}

LocalLayout LocalLayout::within(const LocalLayout& outer) const {
  TESSEL_CHECK(block_dim < 0 && outer.block_dim < 0 && outer.dim != dim &&
                   outer.segments.size() == 1 && outer.segments[0].local_start == 0 &&
                   outer.global.ndim() == global.ndim(),
               "LocalLayout: a split along dim ", dim, " cannot lie inside one along dim ",
               outer.dim, " with ", outer.segments.size(), " segments");
  LocalLayout p = *this;
  p.global = global.with(outer.dim, outer.global[outer.dim]);
  p.block_dim = outer.dim;
  p.block_start = outer.segments[0].global_start;
  return p;
}

}  // namespace tessel::sharding
