// SPDX-License-Identifier: Apache-2.0
// ops::quant_linear and ops::quant_embedding on Q4_0 regrouped four rows at a time
// (kernels/quant/q4_0_groups.h, QuantType::Q4_0x4): the same bits as on the plain Q4_0 rows for
// a prompt longer than one quant_matmul chunk and for one row, and the lookup of rows inside a
// group and in the plain tail (n = 13: three groups and a row) the same values.
#include "tessel/ops/quant_linear.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tessel/autograd/grad_mode.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/q4_0_groups.h"
#include "tessel/kernels/quant/quantize.h"

namespace tessel::ops {
namespace {

using kernels::quant::QuantType;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

TEST(QuantLinearQ4_0Groups, ProductsAndLookupsEqualThePlainRows) {
  autograd::NoGradGuard no_grad;
  constexpr int64_t n = 13, k = 96;
  std::vector<float> w(size_t(n * k));
  uint32_t s = 17;
  for (float& v : w) {
    s = s * 1664525u + 1013904223u;
    v = (float(s >> 8) / float(1 << 24) - 0.5f) * 0.4f;
  }
  const std::vector<uint8_t> plain = kernels::quant::quantize_rows(QuantType::Q4_0, w.data(), n, k);
  std::vector<uint8_t> grouped(plain.size());
  kernels::quant::regroup_q4_0(plain.data(), n, k, grouped.data());
  const Tensor wp = kernels::quant::quantized_weight(QuantType::Q4_0, plain, n, k);
  const Tensor wg = kernels::quant::quantized_weight(QuantType::Q4_0x4, grouped, n, k);
  for (int64_t rows : {1, 7, 67}) {  // 67: two chunks of the product
    const Tensor x = randn({rows, k}, DType::F32);
    EXPECT_TRUE(same_bits(quant_linear(x, QuantType::Q4_0x4, wg, k),
                          quant_linear(x, QuantType::Q4_0, wp, k)))
        << rows;
  }
  const Tensor ids = from_data(std::vector<int64_t>{0, 5, 12, 3, 11, 12}, Shape{2, 3});
  const Tensor got = quant_embedding(QuantType::Q4_0x4, wg, k, ids);
  EXPECT_EQ(got.shape(), Shape({2, 3, k}));
  EXPECT_TRUE(same_bits(got, quant_embedding(QuantType::Q4_0, wp, k, ids)));
}

}  // namespace
}  // namespace tessel::ops
