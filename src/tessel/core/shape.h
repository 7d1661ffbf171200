// SPDX-License-Identifier: Apache-2.0
// Shape: the sizes of a tensor's dimensions (row-major, last dimension fastest), stored inline.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace tessel {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims) : Shape(std::span<const int64_t>(dims)) {}

  int ndim() const { return ndim_; }
  // Negative indices count from the end (-1 is the last dimension).
  int64_t operator[](int dim) const { return dims_[normalize_dim(dim)]; }
  int64_t& operator[](int dim) { return dims_[normalize_dim(dim)]; }
  int64_t numel() const;
  int normalize_dim(int dim) const;  // throws Error when out of range

  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }
  std::span<const int64_t> dims() const { return {dims_.data(), size_t(ndim_)}; }
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }

  // Row-major strides in elements.
  std::vector<int64_t> strides() const;
  void push_back(int64_t size);
  Shape with(int dim, int64_t size) const;  // copy with one dimension changed
  Shape without(int dim) const;             // copy with one dimension removed

  bool operator==(const Shape& other) const;
  std::string str() const;  // "[2, 3, 4]"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Shape& shape);

// The broadcast of two shapes (NumPy rules); throws Error naming both when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace tessel
