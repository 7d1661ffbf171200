// SPDX-License-Identifier: Apache-2.0
// Wrong shapes, dtypes and values raise tessel::Error naming the op and the offending values.
// Each check looks for the op name and the values in the message, not just any Error.
#include <gtest/gtest.h>

#include <string>

#include "tessel/ops/ops.h"

namespace tessel::ops {
namespace {

template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> words) {
  try {
    fn();
    ADD_FAILURE() << "no Error thrown";
  } catch (const Error& e) {
    std::string what = e.what();
    for (const std::string& w : words)
      EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' not in: " << what;
  }
}

Tensor f32(const Shape& s) {
  return zeros(s, DType::F32);
}
Tensor f64(const Shape& s) {
  return zeros(s, DType::F64);
}

TEST(BadInput, ElementwiseShapesAndDtypes) {
  expect_error([] { add(f32({7, 13}), f32({5})); }, {"add", "[7, 13]", "[5]", "broadcast"});
  expect_error([] { mul(f32({7, 1}), f32({3, 2})); }, {"mul", "[7, 1]", "[3, 2]"});
  expect_error([] { sub(f32({3}), f64({3})); }, {"sub", "f32", "f64"});
  expect_error([] { div(zeros({3}, DType::I64), zeros({3}, DType::I64)); }, {"div", "i64"});
  expect_error([] { exp(zeros({3}, DType::I32)); }, {"exp", "i32"});
  expect_error([] { div(f32({3}), 0.0); }, {"div", "scalar 0"});
}

TEST(BadInput, MatmulAndLinear) {
  expect_error([] { linear(f32({7, 13}), f32({5, 12})); }, {"linear", "[7, 13]", "[5, 12]"});
  expect_error(
      [] {
        linear(f32({7, 13}), f32({5, 13}), f32({4}));
      },
      {"linear", "bias", "[4]", "[5]"});
  expect_error([] { linear(f32({7, 13}), f64({5, 13})); }, {"linear", "f32", "f64"});
  expect_error([] { linear(f32({7, 13}), f32({13})); }, {"linear", "weight", "[13]", "2-D"});
  expect_error(
      [] {
        matmul(f32({7, 13}), f32({12, 5}));
      },
      {"matmul", "[7, 13]", "[12, 5]", "13", "12"});
  expect_error(
      [] {
        matmul(f32({2, 7, 13}), f32({3, 13, 5}));
      },
      {"matmul", "[2, 7, 13]", "[3, 13, 5]", "batch"});
  expect_error([] { matmul(f32({13}), f32({13, 5})); }, {"matmul", "[13]", "2 dims"});
}

TEST(BadInput, ReductionsSoftmaxNorms) {
  expect_error([] { sum(f32({7, 3, 13}), {3}); }, {"sum", "dim 3", "[7, 3, 13]"});
  expect_error([] { mean(f32({7, 3}), {1, -1}); }, {"mean", "repeated"});
  expect_error([] { max(f32({7, 0}), {1}); }, {"max", "empty"});
  expect_error([] { softmax(zeros({3}, DType::I32)); }, {"softmax", "i32"});
  expect_error([] { log_softmax(f32({3, 0})); }, {"log_softmax", "[3, 0]"});
  expect_error(
      [] {
        layer_norm(f32({7, 13}), f32({5}), Tensor());
      },
      {"layer_norm", "weight", "[5]", "13"});
  expect_error(
      [] {
        layer_norm(f32({7, 13}), f32({13}), f64({13}));
      },
      {"layer_norm", "bias", "f64"});
  expect_error([] { rms_norm(f32({7, 13}), Tensor()); }, {"rms_norm", "weight"});
  expect_error([] { rms_norm(f32({7, 13}), f32({7})); }, {"rms_norm", "[7]", "13"});
}

TEST(BadInput, EmbeddingAndLosses) {
  expect_error([] { embedding(f32({7, 13}), f32({3})); }, {"embedding", "ids", "f32"});
  expect_error([] { embedding(f32({13}), zeros({3}, DType::I64)); },
               {"embedding", "weight", "[13]"});
  expect_error([] { embedding(f32({7, 13}), full({3}, 7.0, DType::I64)); }, {"embedding", "7"});
  expect_error(
      [] {
        cross_entropy(f32({7, 13}), zeros({5}, DType::I64));
      },
      {"cross_entropy", "[5]", "[7, 13]"});
  expect_error([] { cross_entropy(f32({7, 13}), f32({7})); }, {"cross_entropy", "targets", "f32"});
  expect_error(
      [] {
        cross_entropy(f32({7, 13}), full({7}, 13.0, DType::I64));
      },
      {"cross_entropy", "13"});
  expect_error([] { cross_entropy(f32({13}), zeros({13}, DType::I64)); }, {"cross_entropy", "2-D"});
  expect_error([] { mse_loss(f32({7, 13}), f32({13})); }, {"mse_loss", "[7, 13]", "[13]"});
}

TEST(BadInput, AttentionAndDropout) {
  expect_error(
      [] {
        attention(f32({2, 7, 3, 5}), f32({2, 7, 2, 5}), f32({2, 7, 2, 5}));
      },
      {"attention", "3", "2", "heads"});
  expect_error(
      [] {
        attention(f32({2, 7, 2, 5}), f32({2, 7, 2, 4}), f32({2, 7, 2, 4}));
      },
      {"attention", "[2, 7, 2, 5]", "[2, 7, 2, 4]"});
  expect_error(
      [] {
        attention(f32({2, 7, 2, 5}), f32({2, 7, 2, 5}), f32({2, 6, 2, 5}));
      },
      {"attention", "k", "v", "[2, 6, 2, 5]"});
  expect_error(
      [] {
        attention(f32({2, 7, 2, 5}), f32({2, 7, 2, 5}), f32({2, 7, 2, 5}), true,
                  ones({2, 6}, DType::I8));
      },
      {"attention", "mask", "[2, 6]", "[2, 7]"});
  expect_error(
      [] {
        attention(f32({7, 2, 5}), f32({7, 2, 5}), f32({7, 2, 5}));
      },
      {"attention", "4-D"});
  expect_error(
      [] {
        attention(f32({2, 7, 2, 5}), f32({2, 7, 2, 5}), f32({2, 7, 2, 5}), false, Tensor(), 0.0, 4);
      },
      {"attention", "window 4", "causal"});
  expect_error(
      [] {
        attention(f32({2, 7, 2, 5}), f32({2, 7, 2, 5}), f32({2, 7, 2, 5}), {.window = -1});
      },
      {"attention", "window -1"});
  expect_error([] { dropout(f32({3}), 1.5); }, {"dropout", "1.5"});
  expect_error([] { dropout(f32({3}), -0.1); }, {"dropout", "-0.1"});
}

TEST(BadInput, Rope) {
  Tensor cos = f32({8, 3}), sin = f32({8, 3});
  Tensor pos = zeros({2, 5}, DType::I64);
  pos.data<int64_t>()[7] = 8;  // [1, 2]
  expect_error(
      [&] {
        rope(f32({2, 5, 4, 6}), cos, sin, pos);
      },
      {"rope", "position 8", "[1, 2]", "[0, 8)"});
  pos.data<int64_t>()[7] = -1;
  expect_error([&] { rope(f32({2, 5, 4, 6}), cos, sin, pos); }, {"rope", "position -1"});
  Tensor ok = zeros({2, 5}, DType::I32);
  expect_error(
      [&] {
        rope(f32({2, 5, 4, 7}), f32({8, 3}), f32({8, 3}), ok);
      },
      {"rope", "even", "7"});
  expect_error(
      [&] {
        rope(f32({2, 5, 4, 6}), f32({8, 6}), f32({8, 6}), ok);
      },
      {"rope", "cos", "[8, 6]", "[P, 3]"});
  expect_error(
      [&] {
        rope(f32({2, 5, 4, 6}), f64({8, 3}), f64({8, 3}), ok);
      },
      {"rope", "cos is f64", "f32"});
  expect_error(
      [&] {
        rope(f64({2, 5, 4, 6}), f32({8, 3}), f32({8, 3}), ok);
      },
      {"rope", "cos is f32", "f64"});
  expect_error([&] { rope(f32({2, 5, 4, 6}), cos, f32({9, 3}), ok); }, {"rope", "sin", "cos"});
  expect_error(
      [&] {
        rope(f32({2, 5, 4, 6}), cos, sin, zeros({2, 4}, DType::I64));
      },
      {"rope", "positions", "[2, 4]", "[2, 5]"});
  expect_error(
      [&] {
        rope(f32({2, 5, 4, 6}), cos, sin, f32({2, 5}));
      },
      {"rope", "positions", "i32 or i64", "f32"});
  expect_error([&] { rope(f32({10, 4, 6}), cos, sin, ok); }, {"rope", "4-D"});
  expect_error([&] { rope(zeros({2, 5, 4, 6}, DType::I32), cos, sin, ok); }, {"rope", "i32"});
}

TEST(BadInput, GroupedLinear) {
  Tensor off = from_data<int64_t>({0, 3, 7}, {3});
  expect_error(
      [&] {
        grouped_linear(f32({7, 13}), f32({2, 5, 12}), off);
      },
      {"grouped_linear", "[2, 5, 12]", "[groups, out, 13]"});
  expect_error(
      [&] {
        grouped_linear(f32({7, 13}), f32({3, 5, 13}), off);
      },
      {"grouped_linear", "offsets", "i64 [4]", "[3]"});
  expect_error(
      [&] {
        grouped_linear(f32({7, 13}), f32({2, 5, 13}), from_data<int64_t>({0, 3, 6}, {3}));
      },
      {"grouped_linear", "7 rows", "0 .. 6"});
  expect_error(
      [&] {
        grouped_linear(f32({7, 13}), f64({2, 5, 13}), off);
      },
      {"grouped_linear", "f64", "f32"});
}

TEST(BadInput, ShapeOps) {
  expect_error([] { reshape(f32({7, 13}), {5, 13}); }, {"reshape", "[7, 13]", "[5, 13]"});
  expect_error([] { transpose(f32({7, 13}), 0, 2); }, {"transpose", "dim 2", "[7, 13]"});
  expect_error([] { permute(f32({7, 13}), {1, 1}); }, {"permute", "repeated"});
  expect_error([] { slice(f32({7, 13}), 1, 5, 14); }, {"slice", "[5, 14)", "13"});
  expect_error([] { concat({f32({7, 13}), f64({7, 13})}, 0); }, {"concat", "f64", "f32"});
  expect_error([] { concat({f32({7, 13}), f32({6, 12})}, 0); }, {"concat"});
  expect_error([] { split(f32({7, 13}), {3, 3}, 0); }, {"split", "7"});
  expect_error([] { ops::chunk(f32({7, 13}), 0, 0); }, {"chunk", "0"});
}

}  // namespace
}  // namespace tessel::ops
