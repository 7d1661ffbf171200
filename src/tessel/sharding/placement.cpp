// SPDX-License-Identifier: Apache-2.0
// Placements: their text form, the uneven split rule and local shapes.
#include "tessel/sharding/placement.h"

#include <algorithm>
#include <charconv>

#include "tessel/core/error.h"

namespace tessel::sharding {

Placement Placement::parse(std::string_view text) {
  if (text == "R") return replicate();
  if (text == "P") return partial();
  if (text.size() > 3 && text.substr(0, 2) == "S(" && text.back() == ')') {
    std::string_view digits = text.substr(2, text.size() - 3);
    int d = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), d);
    if (ec == std::errc() && end == digits.data() + digits.size() && d >= 0) return shard(d);
  }
  TESSEL_CHECK(false, "placement '", text, "' is not one of R, P, S(<dim >= 0>)");
  return {};
}

std::string Placement::str() const {
  switch (kind) {
    case PlacementKind::Replicate:
      return "R";
    case PlacementKind::Partial:
      return "P";
    case PlacementKind::Shard:
      return "S(" + std::to_string(dim) + ")";
  }
  return "?";
}

std::string str(std::span<const Placement> placements) {
  std::string s = "[";
  for (size_t i = 0; i < placements.size(); ++i) s += (i ? ", " : "") + placements[i].str();
  return s + "]";
}

int64_t shard_size(int64_t n, int parts, int index) {
  TESSEL_CHECK(parts >= 1 && index >= 0 && index < parts && n >= 0, "shard_size: piece ", index,
               " of ", parts, " of a dim of size ", n, " (need 0 <= piece < parts, size >= 0)");
  return n / parts + (index < n % parts ? 1 : 0);
}

int64_t shard_offset(int64_t n, int parts, int index) {
  TESSEL_CHECK(parts >= 1 && index >= 0 && index < parts && n >= 0, "shard_offset: piece ", index,
               " of ", parts, " of a dim of size ", n, " (need 0 <= piece < parts, size >= 0)");
  return index * (n / parts) + std::min<int64_t>(index, n % parts);
}

std::vector<int64_t> shard_sizes(int64_t n, int parts) {
  std::vector<int64_t> sizes(static_cast<size_t>(parts));
  for (int r = 0; r < parts; ++r) sizes[size_t(r)] = shard_size(n, parts, r);
  return sizes;
}

void check_placements(std::span<const Placement> placements, int ndim,
                      std::span<const int> mesh_sizes) {
  TESSEL_CHECK(placements.size() == mesh_sizes.size(), "placements ", str(placements), " give ",
               placements.size(), " entries for a mesh of ", mesh_sizes.size(), " axes");
  for (const Placement& p : placements)
    TESSEL_CHECK(!p.is_shard() || (p.dim >= 0 && p.dim < ndim), "placement ", p.str(), " in ",
                 str(placements), " names a dim outside a tensor of ", ndim, " dims");
}

namespace {

// Applies the axes in order; returns (sizes, offsets).
std::pair<std::vector<int64_t>, std::vector<int64_t>> piece(const Shape& global,
                                                            std::span<const Placement> placements,
                                                            std::span<const int> mesh_sizes,
                                                            std::span<const int> coords) {
  check_placements(placements, global.ndim(), mesh_sizes);
  TESSEL_CHECK(coords.size() == mesh_sizes.size(), "local_shape: ", coords.size(),
               " coordinates for a mesh of ", mesh_sizes.size(), " axes");
  std::vector<int64_t> sizes(global.dims().begin(), global.dims().end());
  std::vector<int64_t> offsets(sizes.size(), 0);
  for (size_t a = 0; a < placements.size(); ++a) {
    if (!placements[a].is_shard()) continue;
    const size_t d = size_t(placements[a].dim);
    offsets[d] += shard_offset(sizes[d], mesh_sizes[a], coords[a]);
    sizes[d] = shard_size(sizes[d], mesh_sizes[a], coords[a]);
  }
  return {sizes, offsets};
}

}  // namespace

Shape local_shape(const Shape& global, std::span<const Placement> placements,
                  std::span<const int> mesh_sizes, std::span<const int> coords) {
  return Shape(piece(global, placements, mesh_sizes, coords).first);
}

std::vector<int64_t> local_offset(const Shape& global, std::span<const Placement> placements,
                                  std::span<const int> mesh_sizes, std::span<const int> coords) {
  return piece(global, placements, mesh_sizes, coords).second;
}

}  // namespace tessel::sharding
