// SPDX-License-Identifier: Apache-2.0
// A placement seen through a view of other shape (shard_graph.h's view_placement): the planner's
// graph has views between ops (QKV as heads, logits flattened for the loss), and a shard must
// land on the same elements on both sides for the edge to carry it.
#include "tessel/core/error.h"
#include "tessel/plan/shard_graph.h"

namespace tessel::plan {

using sharding::Placement;

std::optional<Placement> view_placement(Placement p, const Shape& from, const Shape& to,
                                        int ranks) {
  if (!p.is_shard()) return p;
  if (from == to) return p;
  TESSEL_CHECK(from.numel() == to.numel(), "view_placement: ", from, " and ", to,
               " hold different numbers of elements");
  int64_t before = 1;
  for (int d = 0; d < p.dim; ++d) before *= from[size_t(d)];
  int64_t acc = 1;
  for (int e = 0; e < int(to.ndim()); ++e) {
    if (acc == before && to[size_t(e)] > 1) {
      const int64_t a = from[size_t(p.dim)], b = to[size_t(e)];
      // The same elements before the cut dim; the pieces coincide when the sizes are equal, or
      // when both split evenly and one dim is whole multiples of the other.
      if (a == b) return Placement::shard(e);
      if (a % ranks == 0 && b % ranks == 0 && (a % b == 0 || b % a == 0))
        return Placement::shard(e);
      return std::nullopt;
    }
    acc *= to[size_t(e)];
    if (acc > before) break;
  }
  return std::nullopt;
}

}  // namespace tessel::plan
