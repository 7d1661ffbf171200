// SPDX-License-Identifier: Apache-2.0
// Bad inputs to the elementwise, reduction, row-wise, embedding, loss, optimizer and dropout
// kernels: each must throw tessel::Error naming the op and the wrong values, on the CPU backend
// and on the reference backend alike, and must leave the outputs untouched.
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "tessel/kernels/backend.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {
namespace {

// Runs fn and checks it throws Error whose message contains every word.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> words) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& w : words)
      EXPECT_NE(msg.find(w), std::string::npos) << "message lacks '" << w << "': " << msg;
    return;
  }
  ADD_FAILURE() << "no tessel::Error thrown";
}

class BadInput : public ::testing::TestWithParam<bool> {
 protected:
  // The backend under test; f64 tensors work on both.
  Backend& be() { return GetParam() ? reference_backend() : cpu_backend(); }
  static constexpr DType kF = DType::F64;
};

TEST_P(BadInput, UnaryShapeAndDtype) {
  Tensor x = zeros({7, 13}, kF), y = zeros({7, 12}, kF);
  expect_error([&] { be().unary(UnaryOp::Exp, x, y); }, {"unary", "[7, 12]", "[7, 13]"});
  Tensor y32 = zeros({7, 13}, DType::F32);
  expect_error([&] { be().unary(UnaryOp::Exp, x, y32); }, {"unary", "f32", "f64"});
  Tensor xi = zeros({7, 13}, DType::I32), yi = zeros({7, 13}, DType::I32);
  expect_error([&] { be().unary(UnaryOp::Exp, xi, yi); }, {"unary", "i32"});
  Tensor dy = zeros({7, 13}, kF), dx = zeros({13, 7}, kF);
  expect_error([&] { be().unary_backward(UnaryOp::Tanh, x, Tensor(), dy, dx); },
               {"unary_backward", "dx", "[13, 7]"});
}

TEST_P(BadInput, BinaryNotBroadcastable) {
  Tensor a = zeros({7, 13}, kF), b = zeros({7, 5}, kF), out = zeros({7, 13}, kF);
  expect_error([&] { be().binary(BinaryOp::Add, a, b, out); },
               {"binary add", "[7, 13]", "[7, 5]", "do not broadcast"});
  Tensor c = zeros({13}, kF), wrong = zeros({7, 1}, kF);
  expect_error([&] { be().binary(BinaryOp::Mul, a, c, wrong); },
               {"binary mul", "out", "[7, 1]", "[7, 13]"});
  Tensor c32 = zeros({13}, DType::F32);
  expect_error([&] { be().binary(BinaryOp::Sub, a, c32, out); }, {"binary sub", "f32", "f64"});
}

TEST_P(BadInput, ReduceDims) {
  Tensor x = zeros({5, 7, 13}, kF);
  Tensor out = zeros({5, 1, 13}, kF);
  int bad[] = {3};
  expect_error([&] { be().reduce(ReduceOp::Sum, x, bad, out); }, {"reduce sum", "dim 3"});
  int twice[] = {1, -2};
  expect_error([&] { be().reduce(ReduceOp::Sum, x, twice, out); }, {"reduce sum", "twice"});
  int last[] = {2};
  expect_error([&] { be().reduce(ReduceOp::Max, x, last, out); },
               {"reduce max", "[5, 1, 13]", "[5, 7, 1]"});
  Tensor empty_dim = zeros({5, 0}, kF), out1 = zeros({5, 1}, kF);
  int d1[] = {1};
  expect_error([&] { be().reduce(ReduceOp::Min, empty_dim, d1, out1); }, {"reduce min", "empty"});
}

TEST_P(BadInput, SoftmaxShapes) {
  Tensor x = zeros({7, 13}, kF), y = zeros({7, 14}, kF);
  expect_error([&] { be().softmax(x, y, false); }, {"softmax", "[7, 14]"});
  Tensor dy = zeros({7, 13}, DType::F32), dx = zeros({7, 13}, kF);
  expect_error([&] { be().softmax_backward(x, dy, dx, true); }, {"softmax_backward", "dy", "f32"});
}

TEST_P(BadInput, NormShapesAndStats) {
  Tensor x = zeros({7, 13}, kF), y = zeros({7, 13}, kF);
  Tensor w = ones({12}, kF), b = zeros({13}, kF), mean = zeros({7}, kF), rstd = zeros({7}, kF);
  expect_error([&] { be().layer_norm(x, w, b, 1e-5, y, mean, rstd); },
               {"layer_norm", "weight", "[12]", "[13]"});
  Tensor w13 = ones({13}, kF), mean6 = zeros({6}, kF);
  expect_error([&] { be().layer_norm(x, w13, b, 1e-5, y, mean6, rstd); },
               {"layer_norm", "mean", "6", "7"});
  Tensor rstd32 = zeros({7}, DType::F32);
  expect_error([&] { be().rms_norm(x, w13, 1e-5, y, rstd32); }, {"rms_norm", "rstd", "f32"});
  expect_error([&] { be().rms_norm(x, w13, -1.0, y, rstd); }, {"rms_norm", "eps", "-1"});
  Tensor dx = zeros({7, 13}, kF), dw = zeros({13}, kF), db = zeros({14}, kF);
  expect_error([&] { be().layer_norm_backward(y, x, w13, mean, rstd, dx, dw, db); },
               {"layer_norm_backward", "dbias", "[14]"});
  Tensor dy_bad = zeros({7, 12}, kF);
  expect_error([&] { be().rms_norm_backward(dy_bad, x, w13, rstd, dx, dw); },
               {"rms_norm_backward", "dy", "[7, 12]"});
}

TEST_P(BadInput, EmbeddingIdOutOfRange) {
  Tensor weight = zeros({10, 4}, kF), out = full({3, 4}, 5.0, kF);
  Tensor ids = from_data<int64_t>({1, 17, 2}, {3});
  expect_error([&] { be().embedding(weight, ids, out); },
               {"embedding", "17", "position 1", "V = 10"});
  EXPECT_EQ(out.to_vector<double>()[0], 5.0) << "output written before validation";
  Tensor neg = from_data<int32_t>({-1, 0, 0}, {3});
  expect_error([&] { be().embedding(weight, neg, out); }, {"embedding", "-1", "V = 10"});
  Tensor fids = zeros({3}, kF);
  expect_error([&] { be().embedding(weight, fids, out); }, {"embedding", "i32 or i64", "f64"});
  Tensor out_bad = zeros({3, 5}, kF);
  Tensor ok_ids = from_data<int64_t>({1, 2, 3}, {3});
  expect_error([&] { be().embedding(weight, ok_ids, out_bad); }, {"embedding", "out", "[3, 5]"});
  Tensor dweight = full({10, 4}, 1.0, kF), dout = ones({3, 4}, kF);
  expect_error([&] { be().embedding_backward(dout, ids, dweight); },
               {"embedding_backward", "17", "V = 10"});
  EXPECT_EQ(dweight.to_vector<double>()[4], 1.0) << "dweight written before validation";
}

TEST_P(BadInput, CrossEntropyTargetOutOfRange) {
  Tensor logits = zeros({3, 5}, kF), losses = zeros({3}, kF), lse = zeros({3}, kF);
  Tensor t = from_data<int64_t>({0, 5, -100}, {3});
  expect_error([&] { be().cross_entropy(logits, t, -100, losses, lse); },
               {"cross_entropy", "5", "V = 5", "ignore_index -100"});
  Tensor t2 = from_data<int32_t>({0, -7, 1}, {3});
  expect_error([&] { be().cross_entropy(logits, t2, -100, losses, lse); },
               {"cross_entropy", "-7", "V = 5"});
  Tensor t_ok = from_data<int64_t>({0, 1, 2}, {3}), lse2 = zeros({2}, kF);
  expect_error([&] { be().cross_entropy(logits, t_ok, -100, losses, lse2); },
               {"cross_entropy", "lse", "2", "3"});
  Tensor t_short = from_data<int64_t>({0, 1}, {2});
  expect_error([&] { be().cross_entropy(logits, t_short, -100, losses, lse); },
               {"cross_entropy", "target", "2", "3"});
  Tensor dl = ones({3}, kF), dlogits = zeros({3, 5}, kF);
  expect_error([&] { be().cross_entropy_backward(logits, t, lse, dl, -100, dlogits); },
               {"cross_entropy_backward", "5", "V = 5"});
}

TEST_P(BadInput, AdamWShapesAndParams) {
  Tensor p = zeros({7}, kF), g = zeros({7}, kF), m = zeros({7}, kF), v = zeros({6}, kF);
  AdamWParams h;
  expect_error([&] { be().adamw(p, g, m, v, h); }, {"adamw", "v", "[6]", "[7]"});
  Tensor v7 = zeros({7}, kF), m32 = zeros({7}, DType::F32);
  expect_error([&] { be().adamw(p, g, m32, v7, h); }, {"adamw", "m", "f32", "f64"});
  h.step = 0;
  expect_error([&] { be().adamw(p, g, m, v7, h); }, {"adamw", "step", "0"});
  h.step = 1;
  h.beta2 = 1.0;
  expect_error([&] { be().adamw(p, g, m, v7, h); }, {"adamw", "beta2", "1"});
}

TEST_P(BadInput, DropoutProbability) {
  Tensor x = zeros({7}, kF), y = zeros({7}, kF);
  expect_error([&] { be().dropout(x, y, 1.5, 0, 0); }, {"dropout", "p", "1.5"});
  expect_error([&] { be().dropout(x, y, -0.1, 0, 0); }, {"dropout", "p", "-0.1"});
  Tensor y_bad = zeros({8}, kF);
  expect_error([&] { be().dropout(x, y_bad, 0.5, 0, 0); }, {"dropout", "y", "[8]"});
}

TEST_P(BadInput, GroupedGemmOffsetsAndShapes) {
  Tensor a = ones({7, 13}, kF), b = ones({3, 13, 5}, kF), c = full({7, 5}, 5.0, kF);
  Tensor bad_end = from_data<int64_t>({0, 2, 4, 6}, {4});
  expect_error([&] { be().grouped_gemm({}, a, b, bad_end, c); },
               {"grouped_gemm", "offsets", "7 rows", "0 .. 6"});
  Tensor decreasing = from_data<int64_t>({0, 5, 3, 7}, {4});
  expect_error([&] { be().grouped_gemm({}, a, b, decreasing, c); },
               {"grouped_gemm", "group 1", "5 > 3"});
  Tensor two_groups = from_data<int64_t>({0, 3, 7}, {3});
  expect_error([&] { be().grouped_gemm({}, a, b, two_groups, c); },
               {"grouped_gemm", "[3, 13, 5]", "2 groups"});
  Tensor ok = from_data<int64_t>({0, 3, 3, 7}, {4});
  Tensor bt = ones({3, 13, 5}, kF);
  expect_error(
      [&] {
        be().grouped_gemm({true, false}, a, bt, ok, c);
      },
      {"grouped_gemm", "k = 13", "k = 5"});
  Tensor dw = full({3, 13, 4}, 5.0, kF), g = ones({7, 5}, kF);
  expect_error(
      [&] {
        be().grouped_gemm({false, true}, a, g, ok, dw);
      },
      {"grouped_gemm", "weight form", "[3, 13, 5]"});
  EXPECT_EQ(c.to_vector<double>()[0], 5.0) << "output written before validation";
  EXPECT_EQ(dw.to_vector<double>()[0], 5.0) << "output written before validation";
}

// The reference backend accepts f64 only; the CPU backend rejects what it cannot run: AdamW on
// 16-bit weights (master weights are f32) and operands whose 16-bit dtypes disagree.
TEST(BadInputDtype, ReferenceRejectsF32AndCpuRejectsBf16AdamWAndMixedDtypes) {
  Tensor x = zeros({7, 13}, DType::F32), y = zeros({7, 13}, DType::F32);
  expect_error([&] { reference_backend().softmax(x, y, false); }, {"softmax", "reference", "f32"});
  Tensor pb = zeros({7, 13}, DType::BF16), gb = zeros({7, 13}, DType::BF16);
  Tensor m = zeros({7, 13}, DType::F32), v = zeros({7, 13}, DType::F32);
  expect_error([&] { cpu_backend().adamw(pb, gb, m, v, AdamWParams{}); }, {"adamw", "cpu", "bf16"});
  Tensor yh = zeros({7, 13}, DType::F16);
  expect_error([&] { cpu_backend().unary(UnaryOp::Gelu, pb, yh); }, {"unary", "bf16", "f16"});
}

INSTANTIATE_TEST_SUITE_P(Backends, BadInput, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Reference" : "Cpu");
                         });

}  // namespace
}  // namespace tessel::kernels
