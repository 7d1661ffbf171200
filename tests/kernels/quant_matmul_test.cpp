// SPDX-License-Identifier: Apache-2.0
// Backend::quant_matmul beyond the harness cases: bad operands are refused by both backends with
// messages naming the values, and the extreme codes (Q8_0's -128 against activations that round
// to +-127) do not saturate the byte products on any kernel set this CPU runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/error_text.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/quantize.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {
namespace {

using quant::QuantType;
using test::expect_error;

Tensor weight_bytes(QuantType type, int64_t n, int64_t k) {
  std::vector<float> wf(size_t(n * k), 0.5f);
  const std::vector<uint8_t> bytes = quant::quantize_rows(type, wf.data(), n, k);
  Tensor w = empty({n, quant::row_bytes(type, k)}, DType::I8);
  std::memcpy(w.data_ptr(), bytes.data(), bytes.size());
  return w;
}

TEST(QuantMatmul, BadOperandsAreRefused) {
  for (Backend* be : {&cpu_backend(), &reference_backend()}) {
    const DType dt = be == &cpu_backend() ? DType::F32 : DType::F64;
    Tensor x = zeros({3, 256}, dt), y = zeros({3, 5}, dt);
    Tensor w = weight_bytes(QuantType::Q4_K, 5, 256);
    be->quant_matmul(QuantType::Q4_K, x, w, y);  // the well-formed call
    expect_error([&] { be->quant_matmul(QuantType::Q8_0, x, w, y); },
                 {"q8_0", "256", "272", "144"});
    Tensor x300 = zeros({3, 300}, dt);
    expect_error([&] { be->quant_matmul(QuantType::Q4_K, x300, w, y); }, {"300", "256"});
    Tensor wf = zeros({5, 144}, DType::F32);
    expect_error([&] { be->quant_matmul(QuantType::Q4_K, x, wf, y); }, {"i8", "f32"});
    Tensor y_bad = zeros({3, 4}, dt);
    expect_error([&] { be->quant_matmul(QuantType::Q4_K, x, w, y_bad); }, {"[3, 5]"});
    Tensor x3 = zeros({1, 3, 256}, dt);
    expect_error([&] { be->quant_matmul(QuantType::Q4_K, x3, w, y); }, {"2-D"});
  }
  Tensor x64 = zeros({3, 256}, DType::F64), y64 = zeros({3, 5}, DType::F64);
  Tensor w = weight_bytes(QuantType::Q4_K, 5, 256);
  expect_error([&] { cpu_backend().quant_matmul(QuantType::Q4_K, x64, w, y64); },
               {"quant_matmul", "f64"});
}

// The path a GGUF loader takes: raw bytes -> quantized_weight -> quant_matmul, which equals the
// f32 product with the f32-dequantized weight up to the activation rounding.
TEST(QuantMatmul, FromGgufBytes) {
  constexpr int64_t n = 5, k = 512;
  std::vector<float> wf(size_t(n * k));
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = float(int(i * 37 % 19) - 9) * 0.01f;
  for (QuantType type : quant::kAllQuantTypes) {
    const std::vector<uint8_t> bytes = quant::quantize_rows(type, wf.data(), n, k);
    Tensor w = quant::quantized_weight(type, bytes, n, k);
    Tensor wd = quant::dequantize(type, bytes, Shape{n, k});
    Tensor x = randn({2, k}, DType::F32), y = zeros({2, n}, DType::F32);
    cpu_backend().quant_matmul(type, x, w, y);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0, scale = 0;
        for (int64_t c = 0; c < k; ++c) {
          want += double(x.data<float>()[i * k + c]) * wd.data<float>()[j * k + c];
          scale += std::abs(double(x.data<float>()[i * k + c]) * wd.data<float>()[j * k + c]);
        }
        EXPECT_NEAR(y.data<float>()[i * n + j], want, 0.02 * scale) << quant::quant_type_name(type);
      }
  }
  expect_error([&] { quant::quantized_weight(QuantType::Q8_0, std::vector<uint8_t>(100), 3, 64); },
               {"q8_0", "3 rows of 64", "204", "100"});
}

TEST(QuantMatmul, ExtremeCodesDoNotSaturate) {
  constexpr int64_t k = 256;
  // One weight row of Q8_0 blocks with d = 1 and codes -128 and 127 alternating, and activations
  // +-1 that round to codes +-127 exactly: every product is +-127 * 128 or 127 * 127, the largest
  // pair sums vpmaddubsw can see.
  std::vector<quant::BlockQ8_0> blocks(k / 32);
  for (auto& b : blocks) {
    b.d = 0x3C00;
    for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(j % 2 ? 127 : -128);
  }
  Tensor w = empty({1, k / 32 * 34}, DType::I8);
  std::memcpy(w.data_ptr(), blocks.data(), blocks.size() * sizeof(blocks[0]));
  Tensor x = empty({2, k}, DType::F32);
  for (int64_t c = 0; c < k; ++c) {
    x.data<float>()[c] = c % 2 ? 1.0f : -1.0f;  // row 0: every product positive
    x.data<float>()[k + c] = -1.0f;             // row 1: mixed signs
  }
  const double want0 = double(k / 2) * (128 + 127), want1 = double(k / 2) * (128 - 127);
  for (KernelSet set : runnable_kernel_sets()) {
    Tensor y = zeros({2, 1}, DType::F32);
    cpu_backend_for(set).quant_matmul(QuantType::Q8_0, x, w, y);
    EXPECT_EQ(double(y.data<float>()[0]), want0) << kernel_set_name(set);
    EXPECT_EQ(double(y.data<float>()[1]), want1) << kernel_set_name(set);
  }
}

}  // namespace
}  // namespace tessel::kernels
