// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/shape.h"

#include <algorithm>
#include <sstream>

#include "tessel/core/error.h"

namespace tessel {

Shape::Shape(std::initializer_list<int64_t> dims)
    : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  TESSEL_CHECK(dims.size() <= size_t(kMaxDims), "shape has ", dims.size(), " dims; at most ",
               kMaxDims, " are supported");
  for (int64_t d : dims) push_back(d);
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

int Shape::normalize_dim(int dim) const {
  int d = dim < 0 ? dim + ndim_ : dim;
  TESSEL_CHECK(d >= 0 && d < ndim_, "dimension ", dim, " out of range for shape ", str());
  return d;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(static_cast<size_t>(ndim_), 1);
  for (int i = ndim_ - 2; i >= 0; --i) s[i] = s[i + 1] * dims_[i + 1];
  return s;
}

void Shape::push_back(int64_t size) {
  TESSEL_CHECK(ndim_ < kMaxDims, "shape ", str(), " already has the maximum of ", kMaxDims,
               " dims");
  TESSEL_CHECK(size >= 0, "negative dimension size ", size);
  dims_[ndim_++] = size;
}

Shape Shape::with(int dim, int64_t size) const {
  Shape s = *this;
  s[dim] = size;
  return s;
}

Shape Shape::without(int dim) const {
  int d = normalize_dim(dim);
  Shape s;
  for (int i = 0; i < ndim_; ++i)
    if (i != d) s.push_back(dims_[i]);
  return s;
}

bool Shape::operator==(const Shape& other) const {
  if (ndim_ != other.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream out;
  out << "[";
  for (int i = 0; i < ndim_; ++i) out << (i ? ", " : "") << dims_[i];
  out << "]";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Shape& shape) {
  return out << shape.str();
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  int n = std::max(a.ndim(), b.ndim());
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    TESSEL_CHECK(da == db || da == 1 || db == 1, "shapes ", a, " and ", b,
                 " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[size_t(i)] = da == 1 ? db : da;
  }
  return Shape(out);
}

}  // namespace tessel
