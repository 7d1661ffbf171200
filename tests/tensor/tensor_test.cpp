// SPDX-License-Identifier: Apache-2.0
// Tensor factories, views, copies, conversions, printing and bad input.
#include "tessel/tensor/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace tessel {
namespace {

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Tensor, Factories) {
  EXPECT_EQ(values(zeros({2, 3})), std::vector<double>(6, 0.0));
  EXPECT_EQ(values(ones({7}, DType::BF16)), std::vector<double>(7, 1.0));
  EXPECT_EQ(values(full({2, 2}, -2.5, DType::F16)), std::vector<double>(4, -2.5));
  EXPECT_EQ(values(arange(0, 5)), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(values(arange(1, 2, 0.25, DType::F64)), (std::vector<double>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(values(arange(3, 0, -1, DType::I32)), (std::vector<double>{3, 2, 1}));
  Tensor t = from_data(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), DType::I64);
  EXPECT_EQ(t.at(std::vector<int64_t>{1, 2}), 6);
  EXPECT_NE(error_of([] {
              from_data(std::vector<float>{1, 2, 3}, {2, 2});
            }).find("3 values for shape [2, 2]"),
            std::string::npos);
  EXPECT_EQ(zeros({0, 5}).numel(), 0);
}

TEST(Tensor, ReshapeIsAViewAndInfers) {
  Tensor t = arange(0, 24).reshape({2, 3, 4});
  Tensor r = t.reshape({6, -1});
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  r.data<float>()[5] = 100;
  EXPECT_EQ(t.at(std::vector<int64_t>{0, 1, 1}), 100);
  EXPECT_NE(error_of([&] { t.reshape({5, 5}); }).find("24 elements"), std::string::npos);
  EXPECT_NE(error_of([&] { t.reshape({-1, -1}); }).find("more than one -1"), std::string::npos);
}

TEST(Tensor, NarrowIsAViewOnlyWhenContiguous) {
  Tensor t = arange(0, 21).reshape({7, 3});
  Tensor n = t.narrow(0, 2, 3);
  EXPECT_EQ(values(n), (std::vector<double>{6, 7, 8, 9, 10, 11, 12, 13, 14}));
  n.fill(-1);
  EXPECT_EQ(t.at(std::vector<int64_t>{2, 0}), -1);
  EXPECT_EQ(values(t.reshape({1, 7, 3}).narrow(1, 6, 1)), (std::vector<double>{18, 19, 20}));
  EXPECT_NE(error_of([&] { t.narrow(1, 0, 2); }).find("use slice() to copy"), std::string::npos);
  EXPECT_NE(error_of([&] { t.narrow(0, 5, 3); }).find("out of range"), std::string::npos);
}

TEST(Tensor, SliceTransposePermuteCopy) {
  Tensor t = arange(0, 24, 1, DType::F64).reshape({2, 3, 4});
  EXPECT_EQ(values(t.slice(2, 1, 3)),
            (std::vector<double>{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22}));
  Tensor tt = t.transpose(0, 2);
  EXPECT_EQ(tt.shape(), (Shape{4, 3, 2}));
  Tensor p = t.permute({1, 2, 0});
  EXPECT_EQ(p.shape(), (Shape{3, 4, 2}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) {
        double v = t.at(std::vector<int64_t>{i, j, k});
        EXPECT_EQ(tt.at(std::vector<int64_t>{k, j, i}), v);
        EXPECT_EQ(p.at(std::vector<int64_t>{j, k, i}), v);
      }
  // Odd sizes and 2-byte elements.
  Tensor h = arange(0, 7 * 13, 1, DType::BF16).reshape({7, 13});
  Tensor ht = h.transpose(0, 1);
  EXPECT_EQ(ht.at(std::vector<int64_t>{12, 6}), h.at(std::vector<int64_t>{6, 12}));
  EXPECT_NE(error_of([&] { t.permute({0, 0, 1}); }).find("repeated"), std::string::npos);
}

TEST(Tensor, ConcatAndSplitRoundTrip) {
  Generator gen(3);
  Tensor a = randn({7, 13, 3}, DType::F32, &gen), b = randn({7, 2, 3}, DType::F32, &gen);
  Tensor c = concat({a, b}, 1);
  EXPECT_EQ(c.shape(), (Shape{7, 15, 3}));
  auto parts = split(c, std::vector<int64_t>{13, 2}, 1);
  EXPECT_EQ(values(parts[0]), values(a));
  EXPECT_EQ(values(parts[1]), values(b));
  auto chunks = chunk(arange(0, 13), 4, 0);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[3].numel(), 1);  // torch.chunk: 4 + 4 + 4 + 1
  EXPECT_NE(error_of([&] { concat({a, b}, 0); }).find("concat along dim 0"), std::string::npos);
  EXPECT_NE(error_of([&] { concat({a, b.to(DType::F64)}, 1); }).find("f64"), std::string::npos);
  EXPECT_NE(error_of([&] {
              split(c, std::vector<int64_t>{3, 3}, 1);
            }).find("sizes sum to 6, expected 15"),
            std::string::npos);
}

TEST(Tensor, ToDtypeRoundsAndCopies) {
  Tensor f = from_data(std::vector<float>{1.00390625f, 2.5f, -3.75f}, {3});
  Tensor b = f.to(DType::BF16);
  EXPECT_EQ(values(b), (std::vector<double>{1.0, 2.5, -3.75}));  // 1 + 2^-8 is a tie: to even
  EXPECT_TRUE(f.to(DType::F32).is_same(f));
  EXPECT_EQ(values(f.to(DType::I32)), (std::vector<double>{1, 2, -3}));
  Tensor c = f.clone();
  c.fill(0);
  EXPECT_EQ(values(f), (std::vector<double>{1.00390625, 2.5, -3.75}));  // clone is a deep copy
  Tensor nan = full({2}, std::nan(""), DType::F32).to(DType::F16);
  EXPECT_TRUE(std::isnan(nan.to_vector<float>()[0]));
}

TEST(Tensor, StorageReleaseKeepsHandles) {
  Tensor t = arange(0, 33);
  Tensor view = t.reshape({3, 11});
  size_t before = cpu_allocator().bytes_in_use();
  t.storage().release();
  EXPECT_EQ(cpu_allocator().bytes_in_use(), before - 33 * 4);
  EXPECT_FALSE(view.storage().is_materialized());
  EXPECT_NE(error_of([&] { view.data_ptr(); }).find("released"), std::string::npos);
  EXPECT_NE(view.str().find("<released>"), std::string::npos);
  t.storage().materialize();
  view.copy_from(arange(100, 133).reshape({3, 11}));
  EXPECT_EQ(t.at(std::vector<int64_t>{32}), 132);  // the same handle sees the new bytes
  EXPECT_EQ(cpu_allocator().bytes_in_use(), before);
}

TEST(Tensor, PrintingElidesLargeDims) {
  Tensor t = arange(0, 6).reshape({2, 3});
  EXPECT_EQ(t.str(), "tensor(f32, [2, 3]) [[0, 1, 2], [3, 4, 5]]");
  std::string big = arange(0, 100).str();
  EXPECT_NE(big.find("..."), std::string::npos);
  EXPECT_NE(big.find("99"), std::string::npos);
}

TEST(Tensor, BadAccess) {
  Tensor t = zeros({2, 3});
  EXPECT_NE(error_of([&] { t.data<double>(); }).find("holds f32, accessed as f64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { t.item(); }).find("6 elements"), std::string::npos);
  EXPECT_NE(error_of([&] { t.copy_from(zeros({3, 2})); }).find("[3, 2]"), std::string::npos);
  EXPECT_NE(error_of([&] { Tensor().shape(); }).find("undefined tensor"), std::string::npos);
  EXPECT_NE(error_of([&] { zeros({2}, DType::I32).set_requires_grad(); }).find("floating dtype"),
            std::string::npos);
}

TEST(Allocator, TracksPeak) {
  cpu_allocator().reset_peak();
  size_t base = cpu_allocator().bytes_in_use();
  {
    Tensor big = empty({1 << 20});
    EXPECT_GE(cpu_allocator().peak_bytes(), base + (4u << 20));
  }
  EXPECT_EQ(cpu_allocator().bytes_in_use(), base);
  EXPECT_GE(cpu_allocator().peak_bytes(), base + (4u << 20));
}

}  // namespace
}  // namespace tessel
