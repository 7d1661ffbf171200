// SPDX-License-Identifier: Apache-2.0
// How a rank's local tensor lies in its global tensor, for writing and reading checkpoint pieces
// (checkpoint_pieces.h). The local tensor is the concatenation along `dim` of segments; segment i
// is the local rows [local_start, local_start + length) along dim, which are the global rows
// [global_start, global_start + length) (every other dim whole). An unsharded tensor is one
// segment covering it; a tensor-parallel shard is one segment per range of parallel::shard_ranges
// (three for GPT-2's fused q, k, v), and local rows in no segment (the vocabulary padding) belong
// to no global tensor: they are not written and read back as zeros.
//
// Any element range [begin, end) of the local tensor (row-major) maps to one element range of
// each segment's box, because the local order of a segment's elements is increasing in its box
// order; that is how a ZeRO flat shard of a tp shard becomes pieces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/train/checkpoint/checkpoint_pieces.h"

namespace tessel::train {

struct LocalPlacement {
  struct Segment {
    int64_t local_start = 0, global_start = 0, length = 0;
  };
  Shape global;
  int dim = 0;
  std::vector<Segment> segments;

  // The local tensor is the whole global tensor.
  static LocalPlacement whole(const Shape& shape);
};

// The pieces of the local elements [begin, end) of a tensor of `local_shape`, whose values are
// `flat` (end - begin elements, row-major), named `name`. Empty pieces are left out.
std::vector<Piece> placed_pieces(const std::string& name, const LocalPlacement& placement,
                                 const Shape& local_shape, int64_t begin, int64_t end,
                                 const Tensor& flat);

// Fills `flat` (f32, end - begin elements) with the local elements [begin, end) of `name` read
// from `reader`; elements in no segment are set to zero.
void read_placed(PieceReader& reader, const std::string& name, const LocalPlacement& placement,
                 const Shape& local_shape, int64_t begin, int64_t end, Tensor flat);

}  // namespace tessel::train
