// SPDX-License-Identifier: Apache-2.0
// Q8_0 and Q4_0 products on AMX-INT8 tiles at every activation row count from 1 to 17
// (kernels/cpu/quant_amx.cpp, quant_amx_driver.h): few_rows below 4 rows, and from 4 the tiles,
// whose last partial tile is only as many rows high as it needs (4, 8 or 12). In batch-invariant
// mode every output is within the activation rounding bound of the fp64 product, and every row has
// the same bits as the same row inside a 33-row prompt (two whole tiles and a 1-row one), whatever
// tile height or kernel computed it. Skipped, naming what is missing, without AMX-INT8. The
// k-quants' counterpart is QuantAmxK.EveryRowCountUpToSeventeen.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant_test_util.h"
#include "tessel/core/cpu_features.h"
#include "tessel/kernels/batch_invariant.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/kernels/quant_amx.h"

namespace tessel::kernels {
namespace {

using quant::QuantType;
using testing_quant::activations;
using testing_quant::within_fp64_bound;

#define SKIP_WITHOUT_AMX()                                 \
  if (!quant_amx_enabled() || !cpu_features().x86_64_v4()) \
  GTEST_SKIP() << "no AMX-INT8 tiles here: " << quant_amx_status()

Tensor product(QuantType t, const Tensor& x, const Tensor& w, int64_t n) {
  const BatchInvariantScope mode(true);
  Tensor y = full({x.size(0), n}, 7.0, DType::F32);
  cpu_backend_for(KernelSet::Avx512).quant_matmul(t, x, w, y);
  return y;
}

// The first m rows of x.
Tensor first_rows(const Tensor& x, int64_t m) {
  Tensor r = empty({m, x.size(1)}, DType::F32);
  std::memcpy(r.data_ptr(), x.data_ptr(), size_t(m * x.size(1)) * 4);
  return r;
}

TEST(QuantAmxRows, EveryRowCountUpToSeventeen) {
  SKIP_WITHOUT_AMX();
  // n = 13 and 35: one partial group, and two whole ones and a partial; k = 96, 224: 3 and 7
  // blocks (an odd block count leaves the tiles a last block alone).
  constexpr int64_t kSizes[][2] = {{13, 224}, {35, 96}};
  uint32_t seed = 3;
  for (QuantType t : {QuantType::Q8_0, QuantType::Q4_0})
    for (const auto& size : kSizes) {
      const int64_t n = size[0], k = size[1];
      std::mt19937 rng(seed++);
      const std::vector<uint8_t> bytes = t == QuantType::Q8_0
                                             ? testing_quant::random_q8_0(n, k, rng)
                                             : testing_quant::random_q4_0(n, k, rng);
      const Tensor w = quant::quantized_weight(t, bytes, n, k);
      const Tensor prompt = activations(33, k, rng);
      const Tensor whole = product(t, prompt, w, n);
      for (int64_t m = 1; m <= 17; ++m) {
        const std::string at = std::string(quant::quant_type_name(t)) + " m" + std::to_string(m) +
                               " n" + std::to_string(n) + " k" + std::to_string(k);
        const Tensor x = first_rows(prompt, m);
        const Tensor y = product(t, x, w, n);
        double worst = 0;
        EXPECT_TRUE(within_fp64_bound(t, bytes, x, y, m, n, k, worst)) << at;
        EXPECT_EQ(std::memcmp(y.data_ptr(), whole.data_ptr(), size_t(m * n) * 4), 0)
            << at << ": rows differ from the same rows in 33";
      }
    }
}

}  // namespace
}  // namespace tessel::kernels
