// SPDX-License-Identifier: Apache-2.0
// Q4_0 weights regrouped four rows at a time for the CPU's decode rows (QuantType::Q4_0x4, a
// layout of tessel's own, made in memory from Q4_0 and never written to a file). Q4_0 as GGUF
// stores it puts each row's 18-byte blocks one after another, so a kernel that multiplies four
// rows side by side gathers every block from four places: four 16-byte loads and three inserts
// for one 512-bit register of codes, four scalar f16 conversions for the scales. Regrouped, block
// g of rows 4G..4G+3 is 72 contiguous bytes: the four rows' f16 scales (8 bytes), then their
// 16 code bytes each, row by row (64 bytes) — one load for the codes, one conversion for the
// scales, and the whole matrix one sequential stream. llama.cpp's CPU backend repacks Q4_0 for
// the same reason ("block_q4_0x4"/"x8" interleaving); this layout is tessel's own, chosen for
// quant_q4_tiles.h's four-rows-per-register decode.
//
// Rows past the last whole group of four (n % 4 of them) stay plain Q4_0 rows after the groups,
// so a regrouped matrix has exactly the bytes and shape [n, row_bytes] of the one it came from,
// and row r < 4 * (n / 4) lives in group r / 4 while a later row lives where Q4_0 puts it.
#pragma once

#include <cstdint>

namespace tessel::kernels::quant {

// Rows per group, the bytes of one regrouped block (4 scales and 4 x 16 code bytes), and where
// the codes start in it.
inline constexpr int64_t kQ4GroupRows = 4;
inline constexpr int64_t kQ4GroupBlockBytes = 72;
inline constexpr int64_t kQ4GroupCodesAt = 8;

// `n` Q4_0 rows of `k` weights (k a multiple of 32) at `src` regrouped into `dst` (the same
// number of bytes; src and dst must not overlap), and back. An Error names k when it is not a
// multiple of 32 or n is negative.
void regroup_q4_0(const uint8_t* src, int64_t n, int64_t k, uint8_t* dst);
void ungroup_q4_0(const uint8_t* src, int64_t n, int64_t k, uint8_t* dst);

// Row `row` (0 <= row < n) of a regrouped matrix of n rows of k weights, as its plain Q4_0 bytes
// (row_bytes(Q4_0, k) of them) in `out`.
void q4_0_group_row(const uint8_t* src, int64_t n, int64_t k, int64_t row, uint8_t* out);
// Block g of that row, as its plain 18 Q4_0 bytes.
void q4_0_group_block(const uint8_t* src, int64_t n, int64_t k, int64_t row, int64_t g,
                      uint8_t* out);

}  // namespace tessel::kernels::quant
