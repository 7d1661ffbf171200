// SPDX-License-Identifier: Apache-2.0
// redistribute: turns one placement into another with the right collective (DTensor's
// redistribute), differentiably, and says beforehand what it costs so the planner and the runtime
// use the same numbers.
//
// Along one mesh axis of k ranks (a tensor of G bytes as that axis sees it):
//   from  to     collective                bytes sent per rank (the busiest rank, ring algorithms)
//   S(d)  R      all_gather / all_gather_v G - smallest piece
//   R     S(d)   none (local slice)        0
//   P     R      all_reduce                2 (G - floor(numel / k) elements)
//   P     S(d)   reduce_scatter            (k - 1) * ceil(n_d / k) * (G / n_d)  (pieces padded)
//   S(d)  S(e)   all_to_all / all_to_all_v max over r of piece_d(r) * (n_e - piece_e(r)) * rest
//   R     P      none: coordinate 0 keeps the values, the others hold zeros
//   S(d)  P      none: each rank puts its piece into zeros of the full shape
//   x     x      none
// The "_v" forms are used when the dim does not divide evenly by k. Uneven P -> S(d) pads every
// piece to ceil(n_d / k) rows so that reduce_scatter's equal blocks apply, then drops the padding.
// An axis of one rank never communicates.
//
// Gradients (Megatron's replicated-loss convention: the gradient of a tensor has the tensor's
// placement, except that the gradient of a Partial tensor is Replicate): the backward of
// from -> to is grad(to) -> grad(from), so S -> R backward is a local slice, R -> S an all_gather,
// P -> R the identity, P -> S an all_gather, S(d) -> S(e) an all_to_all back. Where each rank's
// work after the call differs (a Colwise layer after a replicated input), the gradient reaching
// the output is a per-rank addend instead: GradArrives::Partial, whose backward starts from P
// (R -> R backward is then an all_reduce, S(d) -> R a reduce_scatter). Megatron-LM's region
// functions (regions.h) are redistributions of either kind.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/core/dtype.h"
#include "tessel/sharding/dist_tensor.h"

namespace tessel::sharding {

struct RedistributeCost {
  int64_t bytes = 0;       // sent by the busiest rank of the axis
  std::string collective;  // "all_gather", ..., or "none" when nothing is communicated
  friend bool operator==(const RedistributeCost&, const RedistributeCost&) = default;
};

// `shape`: the tensor as the axis sees it (the global shape with the other axes' shards applied).
// Throws Error for placements that do not fit the shape.
RedistributeCost redistribute_cost(Placement from, Placement to, const Shape& shape, DType dtype,
                                   int axis_size);

// Changes every axis whose placement differs from `to`, one at a time, the last axis first.
// Refuses (an Error naming both axes, before any communication) a change on an axis while a later
// axis shards the same dim. Collective over those axes; differentiable through the local tensor.
DistTensor redistribute(const DistTensor& x, const Placements& to);

// How the gradient reaches the output of a redistribution (see above).
enum class GradArrives { AsPlacement, Partial };

// One axis on plain tensors: `local` is this rank's piece of a tensor of `shape` placed `from`
// along `comm`; returns its piece placed `to`. Differentiable (see above). `cost`, when given,
// receives what redistribute_cost() predicts for the call issued (the backward's cost is that of
// the reverse redistribution of the gradient). Every call with communication adds its predicted
// bytes to the axis's tally (predicted_bytes).
Tensor redistribute_local(const Tensor& local, dist::Communicator& comm, Placement from,
                          Placement to, const Shape& shape, RedistributeCost* cost = nullptr,
                          GradArrives grad = GradArrives::AsPlacement);

// The bytes redistribute_cost() predicted for every redistribution this thread issued on the
// communicator labelled `label` (forward and backward), since the thread started: what the
// runtime's tensor-parallel traffic is, in the planner's terms.
int64_t predicted_bytes(const std::string& label);

}  // namespace tessel::sharding
