// SPDX-License-Identifier: Apache-2.0
// Sharding rules per op: each op's shape rule and, next to it, the placement signatures it accepts
// along one mesh axis (the op rules of GSPMD and of DTensor's sharding propagation). The
// tensor-parallel styles are instances of these signatures (Colwise is linear's (R, S(0)) ->
// S(-1), Rowwise its (S(-1), S(1)) -> P, Sequence layer_norm's (S(-2), R, R) -> S(-2), ...), and
// the planner is to read the same table, so the two cannot disagree.
//
// A signature lists one placement per input and the output's. Shard dims may be negative,
// counted from the end of that tensor's shape (S(-1): the last dim), so one signature serves
// every rank of input. Unless it is marked `composite`, a signature means: each rank applies the
// op itself to its local pieces, and the result is its piece of the output in the output
// placement. A composite signature needs more than the plain op on pieces (a masked lookup, or
// collectives inside the op); the style that implements it says how.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/shape.h"
#include "tessel/sharding/placement.h"

namespace tessel::sharding {

struct OpSignature {
  std::vector<Placement> inputs;
  Placement output;
  std::string use;  // what it is for: "Colwise", "sequence", ...
  bool composite = false;
};

struct OpRule {
  std::string name;
  size_t inputs = 0;
  // The output shape from the input shapes; throws Error for shapes the op refuses.
  std::function<Shape(std::span<const Shape>)> shape;
  std::vector<OpSignature> signatures;
};

// Every rule: linear, add, mul, gelu, layer_norm, embedding, attention, cross_entropy.
const std::vector<OpRule>& op_rules();
// Throws Error for an unknown op.
const OpRule& op_rule(std::string_view name);

// `p` with a negative Shard dim resolved against a tensor of `ndim` dims.
Placement resolve(Placement p, int64_t ndim);

// The declared signature of `op` matching these input placements for inputs of these shapes
// (dims compared after resolving), or nullopt. The output shape comes from the shape rule.
std::optional<OpSignature> find_signature(std::string_view op, std::span<const Placement> inputs,
                                          std::span<const Shape> shapes);

}  // namespace tessel::sharding
