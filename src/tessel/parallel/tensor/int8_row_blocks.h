// SPDX-License-Identifier: Apache-2.0
// A row-parallel layer's int8 product in one process's activation blocks. The weight-only int8
// product (kernels/cpu/quant_matmul.cpp) rounds its activations to int8 per 32-column block,
// with each block's scale max|x| / 127, and multiplies the last K mod 32 columns in f32. A rank
// holding input columns [a, e) of K rounds its slice in blocks that start at its column 0, so
// unless a and e fall on multiples of 32 its blocks and scales are not one process's, and the
// sum over the ranks moves the logits by far more than the f32 order of the sums does.
//
// Here each rank rounds in the blocks of the whole row instead: its slice is padded with zero
// columns (`lead` before it, `trail` after it) so that its local blocks start at global
// multiples of 32, the weight piece gets zero codes in the same columns, and a block shared with
// another rank gets the whole block's max|x|, per activation row, from one all-reduce (max) of
// the shared blocks' maxima (at most tp - 1 floats per row). The padded input carries that
// maximum in a padding column, whose weight code is 0: the kernel's block maximum becomes the
// whole block's, every code and scale is one process's, and the padding adds nothing to the
// integer dot product. Splits on multiples of 32 (the common widths at tp 2 to 8) have no
// shared block and run as before, with no padding and no all-reduce.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/tensor/tensor.h"

namespace tessel::parallel {

// Rank `rank`'s slice of `in_features` input columns split over `ranks` (the balanced split of
// sharding/placement.h) among the int8 product's 32-column activation blocks.
struct Int8RowSlice {
  int64_t offset = 0;  // the slice's first global column
  int64_t len = 0;     // its columns
  int64_t lead = 0;    // zero columns before it: offset - lead is a multiple of 32
  int64_t trail = 0;   // zero columns after it, up to the end of a block another rank finishes
  // The whole blocks (index = first column / 32) split between ranks: the same list on every
  // rank. The f32 tail (columns past the last multiple of 32) is never listed: its columns are
  // multiplied as they are wherever they lie.
  std::vector<int64_t> shared;
  int64_t padded() const { return lead + len + trail; }
  bool aligned() const { return shared.empty(); }
};

Int8RowSlice int8_row_slice(int64_t in_features, int ranks, int rank);

// x: this rank's f32 activation slice [..., len]. Returns [..., padded()]: x between `lead` and
// `trail` zero columns, with the whole row's maximum |x| of a shared block in the padding column
// of that block (the first for the lead, the last for the trail). Collective over tp when the
// split is not aligned (every rank of tp calls it with the same number of rows).
Tensor int8_row_input(const Tensor& x, const Int8RowSlice& slice, dist::Communicator& tp);

// A float matrix [rows, len] -> [rows, padded()] with zero `lead` and `trail` columns.
Tensor pad_int8_columns(const Tensor& weight, const Int8RowSlice& slice);

}  // namespace tessel::parallel
