// SPDX-License-Identifier: Apache-2.0
// Row-parallel int8 products in the whole row's activation blocks (int8_row_blocks.h).
#include "tessel/parallel/tensor/int8_row_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessel/core/error.h"
#include "tessel/sharding/placement.h"

namespace tessel::parallel {

namespace {

// The int8 product's activation block (kernels/cpu/quant_dot.h, kActBlock).
constexpr int64_t kBlock = 32;

}  // namespace

Int8RowSlice int8_row_slice(int64_t in_features, int ranks, int rank) {
  TESSEL_CHECK(ranks >= 1 && rank >= 0 && rank < ranks && in_features >= ranks,
               "int8_row_slice: ", in_features, " columns over ", ranks, " ranks, rank ", rank);
  Int8RowSlice s;
  s.offset = sharding::shard_offset(in_features, ranks, rank);
  s.len = sharding::shard_size(in_features, ranks, rank);
  const int64_t whole = in_features / kBlock;  // blocks before the f32 tail
  // A split point inside a whole block shares that block between the ranks on either side.
  for (int r = 1; r < ranks; ++r) {
    const int64_t at = sharding::shard_offset(in_features, ranks, r);
    const int64_t block = at / kBlock;
    if (at % kBlock != 0 && block < whole && (s.shared.empty() || s.shared.back() != block))
      s.shared.push_back(block);
  }
  const int64_t end = s.offset + s.len;
  if (s.offset % kBlock != 0 && s.offset / kBlock < whole) s.lead = s.offset % kBlock;
  if (end % kBlock != 0 && end / kBlock < whole) s.trail = kBlock - end % kBlock;
  return s;
}

Tensor int8_row_input(const Tensor& x, const Int8RowSlice& slice, dist::Communicator& tp) {
  TESSEL_CHECK(x.defined() && x.dtype() == DType::F32 && x.ndim() >= 1 && x.size(-1) == slice.len,
               "int8_row_input: x ", x.defined() ? x.shape().str() : std::string("undefined"),
               " must be f32 ending in this rank's ", slice.len, " input columns");
  const int64_t rows = x.numel() / std::max<int64_t>(slice.len, 1);
  const int64_t shared = int64_t(slice.shared.size()), width = slice.padded();
  const float* src = x.data<float>();
  // Each shared block's max|x| over this rank's columns of it (0 where it holds none), then the
  // maximum over the ranks: the whole block's, exactly (max does not round).
  Tensor maxima = zeros({rows, std::max<int64_t>(shared, 1)});
  float* mx = maxima.data<float>();
  for (int64_t b = 0; b < shared; ++b) {
    const int64_t first = std::max(slice.shared[size_t(b)] * kBlock, slice.offset) - slice.offset;
    const int64_t last =
        std::min((slice.shared[size_t(b)] + 1) * kBlock, slice.offset + slice.len) - slice.offset;
    for (int64_t i = 0; i < rows; ++i) {
      float m = 0;
      for (int64_t c = first; c < last; ++c) m = std::max(m, std::fabs(src[i * slice.len + c]));
      mx[i * shared + b] = m;
    }
  }
  if (shared > 0) tp.all_reduce(maxima, dist::ReduceOp::Max);
  // The blocks this rank's lead and trail columns pad: its first and its last column's.
  const auto index_of = [&](int64_t column) {
    const auto it = std::find(slice.shared.begin(), slice.shared.end(), column / kBlock);
    TESSEL_CHECK(it != slice.shared.end(), "int8_row_input: column ", column,
                 " pads a block that no other rank shares");
    return int64_t(it - slice.shared.begin());
  };
  const int64_t lead_block = slice.lead > 0 ? index_of(slice.offset) : -1;
  const int64_t trail_block = slice.trail > 0 ? index_of(slice.offset + slice.len - 1) : -1;
  Shape shape = x.shape().with(-1, width);
  Tensor out = zeros(shape);
  float* dst = out.data<float>();
  for (int64_t i = 0; i < rows; ++i) {
    float* row = dst + i * width;
    std::memcpy(row + slice.lead, src + i * slice.len, size_t(slice.len) * sizeof(float));
    if (lead_block >= 0) row[0] = mx[i * shared + lead_block];
    if (trail_block >= 0) row[width - 1] = mx[i * shared + trail_block];
  }
  return out;
}

Tensor pad_int8_columns(const Tensor& weight, const Int8RowSlice& slice) {
  TESSEL_CHECK(weight.defined() && weight.ndim() == 2 && weight.size(1) == slice.len,
               "pad_int8_columns: weight ",
               weight.defined() ? weight.shape().str() : std::string("undefined"),
               " must hold this rank's ", slice.len, " input columns");
  const int64_t rows = weight.size(0), width = slice.padded();
  const size_t elem = weight.element_size();
  Tensor out = zeros({rows, width}, weight.dtype());  // zero bits are 0 in f32, f16 and bf16
  const auto* src = static_cast<const char*>(weight.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + (r * width + slice.lead) * elem, src + r * slice.len * elem,
                size_t(slice.len) * elem);
  return out;
}

}  // namespace tessel::parallel
