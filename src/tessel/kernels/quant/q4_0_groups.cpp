// SPDX-License-Identifier: Apache-2.0
// Q4_0 rows regrouped four at a time and back (q4_0_groups.h).
#include "tessel/kernels/quant/q4_0_groups.h"

#include <cstring>

#include "tessel/core/error.h"
#include "tessel/kernels/quant/quant_format.h"

namespace tessel::kernels::quant {

namespace {

constexpr int64_t kQ4BlockBytes = 18, kQ4Codes = 16;

int64_t checked_row_bytes(int64_t n, int64_t k, const char* what) {
  TESSEL_CHECK(n >= 0, what, ": ", n, " rows");
  return row_bytes(QuantType::Q4_0, k);
}

// Where block g of row j of a group sits in the regrouped group at `group`: its scale and codes.
inline int64_t scale_at(int64_t j, int64_t g) {
  return g * kQ4GroupBlockBytes + 2 * j;
}
inline int64_t codes_at(int64_t j, int64_t g) {
  return g * kQ4GroupBlockBytes + kQ4GroupCodesAt + kQ4Codes * j;
}

}  // namespace

void regroup_q4_0(const uint8_t* src, int64_t n, int64_t k, uint8_t* dst) {
  const int64_t rb = checked_row_bytes(n, k, "regroup_q4_0"), blocks = k / 32;
  const int64_t whole = n / kQ4GroupRows * kQ4GroupRows;
  for (int64_t r0 = 0; r0 < whole; r0 += kQ4GroupRows)
    for (int64_t j = 0; j < kQ4GroupRows; ++j)
      for (int64_t g = 0; g < blocks; ++g) {
        const uint8_t* p = src + (r0 + j) * rb + g * kQ4BlockBytes;
        std::memcpy(dst + r0 * rb + scale_at(j, g), p, 2);
        std::memcpy(dst + r0 * rb + codes_at(j, g), p + 2, kQ4Codes);
      }
  if (n > whole) std::memcpy(dst + whole * rb, src + whole * rb, size_t((n - whole) * rb));
}

void q4_0_group_block(const uint8_t* src, int64_t n, int64_t k, int64_t row, int64_t g,
                      uint8_t* out) {
  const int64_t rb = checked_row_bytes(n, k, "q4_0_group_block");
  TESSEL_CHECK(row >= 0 && row < n && g >= 0 && g < k / 32, "q4_0_group_block: row ", row,
               " block ", g, " outside [0, ", n, ") x [0, ", k / 32, ")");
  const int64_t whole = n / kQ4GroupRows * kQ4GroupRows;
  if (row >= whole) {
    std::memcpy(out, src + row * rb + g * kQ4BlockBytes, kQ4BlockBytes);
    return;
  }
  const uint8_t* group = src + (row - row % kQ4GroupRows) * rb;
  const int64_t j = row % kQ4GroupRows;
  std::memcpy(out, group + scale_at(j, g), 2);
  std::memcpy(out + 2, group + codes_at(j, g), kQ4Codes);
}

void q4_0_group_row(const uint8_t* src, int64_t n, int64_t k, int64_t row, uint8_t* out) {
  TESSEL_CHECK(row >= 0 && row < n, "q4_0_group_row: row ", row, " outside [0, ", n, ")");
  for (int64_t g = 0; g < k / 32; ++g) q4_0_group_block(src, n, k, row, g, out + g * kQ4BlockBytes);
}

void ungroup_q4_0(const uint8_t* src, int64_t n, int64_t k, uint8_t* dst) {
  const int64_t rb = checked_row_bytes(n, k, "ungroup_q4_0");
  for (int64_t r = 0; r < n; ++r) q4_0_group_row(src, n, k, r, dst + r * rb);
}

}  // namespace tessel::kernels::quant
