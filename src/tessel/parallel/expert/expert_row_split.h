// SPDX-License-Identifier: Apache-2.0
// The rows of an expert-parallel exchange split over a tensor-parallel group. Under expert tensor
// parallelism every rank of a tp group holds the same tokens and routes them alike, so without a
// split each tp rank would send the same rows to its ep peers: the all-to-all bytes repeated tp
// times. Instead each tp rank sends its balanced piece of every destination's block of rows, and
// the receivers' tp group gathers the pieces back into the whole block before the experts (which
// need every row on every tp rank: each holds a slice of every expert's FFN columns); the combine
// does the same in reverse. Megatron-LM's "scatter to" / "gather from" the model-parallel region
// (Shoeybi et al. 2019), along rows and with uneven pieces:
//
//   function                forward                          backward
//   scatter_rows_to_tp      this rank's rows of x            all_gather_v of the pieces
//   gather_rows_from_tp     all_gather_v of the pieces       this rank's rows of the gradient
//
// Both expect the whole rows and their gradient to be the same on every rank of the group (the
// tensor before the scatter and after the gather is replicated over tp), which holds on both sides
// of the experts' own f and g. docs/MOE.md, "Expert tensor parallelism".
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/tensor/tensor.h"

namespace tessel::parallel {

// Rows [0, total) in consecutive blocks of `blocks[b]` rows (one per ep rank), each block split
// over `parts` tp ranks by placement.h's balanced rule; a rank's piece is its part of every block,
// in block order.
class RowPieces {
 public:
  RowPieces(std::vector<int64_t> blocks, int parts);
  int parts() const { return parts_; }
  int64_t total() const { return total_; }
  // Rows of rank `part`'s piece in each block (the counts it exchanges with each ep rank).
  std::vector<int64_t> piece_blocks(int part) const;
  int64_t piece_rows(int part) const;
  // Copies rank `part`'s rows of `whole` [total, ...] into a [piece_rows, ...] tensor, or back.
  Tensor take(const Tensor& whole, int part) const;
  void put(const Tensor& piece, int part, const Tensor& whole) const;

 private:
  std::vector<int64_t> blocks_, starts_;
  int parts_;
  int64_t total_ = 0;
};

// Differentiable; every rank of `tp` calls them in the same order, forward and backward.
Tensor scatter_rows_to_tp(const Tensor& x, const RowPieces& pieces, dist::Communicator& tp);
Tensor gather_rows_from_tp(const Tensor& piece, const RowPieces& pieces, dist::Communicator& tp);

}  // namespace tessel::parallel
