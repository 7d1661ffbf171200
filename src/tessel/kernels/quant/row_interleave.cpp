// SPDX-License-Identifier: Apache-2.0
// The k-quants' super-blocks and Q8_0's blocks interleaved four rows at a time and back
// (row_interleave.h).
#include "tessel/kernels/quant/row_interleave.h"

#include <cstring>

#include "tessel/core/error.h"

namespace tessel::kernels::quant {

bool is_interleaved(QuantType type) {
  return type == QuantType::Q4_Kx4 || type == QuantType::Q5_Kx4 || type == QuantType::Q6_Kx4 ||
         type == QuantType::Q8_0x4;
}

QuantType interleaved_form(QuantType plain) {
  switch (plain) {
    case QuantType::Q4_K:
      return QuantType::Q4_Kx4;
    case QuantType::Q5_K:
      return QuantType::Q5_Kx4;
    case QuantType::Q6_K:
      return QuantType::Q6_Kx4;
    case QuantType::Q8_0:
      return QuantType::Q8_0x4;
    default:
      TESSEL_FAIL("interleaved_form: ", quant_type_name(plain),
                  " has no interleaved form (q4_K, q5_K, q6_K and q8_0 have)");
  }
}

QuantType plain_form(QuantType type) {
  switch (type) {
    case QuantType::Q4_Kx4:
      return QuantType::Q4_K;
    case QuantType::Q5_Kx4:
      return QuantType::Q5_K;
    case QuantType::Q6_Kx4:
      return QuantType::Q6_K;
    case QuantType::Q8_0x4:
      return QuantType::Q8_0;
    default:
      return type;
  }
}

namespace {

// Where the blocks of an interleaved matrix of n rows lie, its sizes worked out once.
struct Placement {
  int64_t rb, bb, whole;
  Placement(QuantType interleaved, int64_t n, int64_t k)
      : rb(row_bytes(interleaved, k)),
        bb(block_bytes(interleaved)),
        whole(n / kInterleaveRows * kInterleaveRows) {}
  int64_t offset(int64_t row, int64_t b) const {
    if (row >= whole) return row * rb + b * bb;
    const RowStrides s = interleaved_strides(bb);
    return (row - row % kInterleaveRows) * rb + (row % kInterleaveRows) * s.row + b * s.block;
  }
};

// Every block of the matrix in the two layouts: plain offset -> interleaved offset.
template <class Copy>
void each_block(QuantType interleaved, int64_t n, int64_t k, const char* what, Copy copy) {
  TESSEL_CHECK(n >= 0, what, ": ", n, " rows");
  const Placement at(interleaved, n, k);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < at.rb / at.bb; ++b) copy(r * at.rb + b * at.bb, at.offset(r, b), at.bb);
}

}  // namespace

int64_t interleaved_block_offset(QuantType interleaved, int64_t n, int64_t k, int64_t row,
                                 int64_t b) {
  TESSEL_CHECK(is_interleaved(interleaved),
               "interleaved_block_offset: ", quant_type_name(interleaved),
               " is not an interleaved type");
  const Placement at(interleaved, n, k);
  TESSEL_CHECK(row >= 0 && row < n && b >= 0 && b < at.rb / at.bb, "interleaved_block_offset: row ",
               row, " block ", b, " outside [0, ", n, ") x [0, ", at.rb / at.bb, ")");
  return at.offset(row, b);
}

void interleave_rows(QuantType plain, const uint8_t* src, int64_t n, int64_t k, uint8_t* dst) {
  each_block(interleaved_form(plain), n, k, "interleave_rows",
             [&](int64_t from, int64_t to, int64_t bytes) {
               std::memcpy(dst + to, src + from, size_t(bytes));
             });
}

void deinterleave_rows(QuantType interleaved, const uint8_t* src, int64_t n, int64_t k,
                       uint8_t* dst) {
  TESSEL_CHECK(is_interleaved(interleaved), "deinterleave_rows: ", quant_type_name(interleaved),
               " is not an interleaved type");
  each_block(interleaved, n, k, "deinterleave_rows", [&](int64_t to, int64_t from, int64_t bytes) {
    std::memcpy(dst + to, src + from, size_t(bytes));
  });
}

}  // namespace tessel::kernels::quant
