// SPDX-License-Identifier: Apache-2.0
// The k-quants (Q4_K, Q5_K, Q6_K) and Q8_0 with their blocks interleaved four rows at a time
// (QuantType::Q4_Kx4, Q5_Kx4, Q6_Kx4, Q8_0x4: a layout of tessel's own, made in memory where the
// CPU backend asks for it, never read from or written to a file). GGUF stores a matrix row after
// row, so the decode rows, which multiply four weight rows with one activation row, read four
// streams a row apart; on one core that access pattern, not the bytes, held the Q4_K_M decode at
// 0.61-0.71 of the read bandwidth's floor, and the same work on one interleaved stream ran 10-20%
// faster (docs/BENCHMARKS.md, "k-quant direct rows"). Interleaved, block b of rows 4G..4G+3 are the
// four rows' whole blocks side by side, so a group of four rows is one sequential stream. Unlike
// Q4_0x4 (q4_0_groups.h) no block is taken apart: every kernel reads a block where it lies, with a
// stride between rows and another between blocks (RowStrides).
//
// Rows past the last whole group of four (n % 4 of them) stay plain rows after the groups, so an
// interleaved matrix has exactly the bytes and shape [n, row_bytes] of the one it came from: the
// group of row r < 4 * (n / 4) starts at byte (r - r % 4) * row_bytes, as in the plain layout.
#pragma once

#include <cstdint>

#include "tessel/kernels/quant/quant_format.h"

namespace tessel::kernels::quant {

inline constexpr int64_t kInterleaveRows = 4;

// Q4_Kx4, Q5_Kx4, Q6_Kx4, Q8_0x4.
bool is_interleaved(QuantType type);
// Q4_K -> Q4_Kx4 (Q5_K, Q6_K, Q8_0 likewise); an Error for a type that has no interleaved form.
QuantType interleaved_form(QuantType plain);
// Q4_Kx4 -> Q4_K (likewise); any other type itself.
QuantType plain_form(QuantType type);

// How the rows of one whole group are laid out: from a row to the next, from a block to the next
// of the same row. Rows of the plain layout (and the rows after the last whole group) are
// {row_bytes, block_bytes}; a group of an interleaved one {block_bytes, 4 * block_bytes}.
struct RowStrides {
  int64_t row, block;
};
inline RowStrides plain_strides(int64_t row_bytes, int64_t block_bytes) {
  return {row_bytes, block_bytes};
}
inline RowStrides interleaved_strides(int64_t block_bytes) {
  return {block_bytes, kInterleaveRows * block_bytes};
}

// `n` rows of `k` weights of the plain type at `src` interleaved into `dst` (the same number of
// bytes; src and dst must not overlap), and back. An Error names the type when it has no
// interleaved form, k when it is not a multiple of the type's block, n when it is negative.
void interleave_rows(QuantType plain, const uint8_t* src, int64_t n, int64_t k, uint8_t* dst);
void deinterleave_rows(QuantType interleaved, const uint8_t* src, int64_t n, int64_t k,
                       uint8_t* dst);

// The byte offset of block b of row `row` in an interleaved matrix of n rows of k weights (an
// Error names row and b when they lie outside it).
int64_t interleaved_block_offset(QuantType interleaved, int64_t n, int64_t k, int64_t row,
                                 int64_t b);

}  // namespace tessel::kernels::quant
