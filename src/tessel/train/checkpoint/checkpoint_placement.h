// SPDX-License-Identifier: Apache-2.0
// Local tensors to checkpoint pieces and back: a rank's local tensor lies in its global tensor as
// a sharding::LocalLayout (sharding/shard_layout.h: segments along one dim); local rows in no
// segment (the vocabulary padding) belong to no global tensor: they are not written and read back
// as zeros.
//
// Any element range [begin, end) of the local tensor (row-major) maps to one element range of
// each segment's box, because the local order of a segment's elements is increasing in its box
// order; that is how a ZeRO flat shard (a range of a flat buffer) of a tp shard becomes pieces.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/sharding/shard_layout.h"
#include "tessel/train/checkpoint/checkpoint_pieces.h"

namespace tessel::train {

// The pieces of the local elements [begin, end) of a tensor of `local_shape`, whose values are
// `flat` (end - begin elements, row-major, any float dtype), named `name`. The pieces are views of
// `flat` (Piece::runs), nothing is copied. Empty pieces are left out.
std::vector<Piece> placed_pieces(const std::string& name, const sharding::LocalLayout& placement,
                                 const Shape& local_shape, int64_t begin, int64_t end,
                                 const Tensor& flat);

// Where the values of global tensors come from: fills `dst` (f32, region.numel() values, row-major)
// with `region` of the global tensor `name`. A checkpoint's pieces (PieceReader::read), or values
// computed per element (an initialisation recipe, train/materialize.h).
using RegionSource =
    std::function<void(const std::string& name, const PieceRegion& region, float* dst)>;

// Checks that `region` lies inside a tensor of `shape` (an Error names `name` and both).
void check_region(const std::string& name, const Shape& shape, const PieceRegion& region);

// The region's elements as runs of consecutive elements of the global tensor (at most a row of the
// box each): fn(global flat index of the first, count, its index in the region's [begin, end)).
void for_each_run(const Shape& shape, const PieceRegion& region,
                  const std::function<void(int64_t global, int64_t n, int64_t at)>& fn);

// Fills `flat` (f32, end - begin elements) with the local elements [begin, end) of `name` from
// `source`, one call per run of consecutive elements, straight into place (no buffer of the
// segment); elements in no segment are set to zero.
void fill_placed(const RegionSource& source, const std::string& name,
                 const sharding::LocalLayout& placement, const Shape& local_shape, int64_t begin,
                 int64_t end, Tensor flat);

// fill_placed from `reader`, after checking that the checkpoint's tensor has the global shape.
void read_placed(PieceReader& reader, const std::string& name,
                 const sharding::LocalLayout& placement, const Shape& local_shape, int64_t begin,
                 int64_t end, Tensor flat);

}  // namespace tessel::train
