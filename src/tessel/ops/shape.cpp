// SPDX-License-Identifier: Apache-2.0
// Shape ops and their backward nodes: reshape back, the inverse permutation, zero-padding for
// slice, split for concat and concat for split.
#include "tessel/ops/shape.h"

#include <algorithm>
#include <utility>

#include "tessel/ops/common.h"

namespace tessel::ops {

namespace {

class ReshapeBackward final : public autograd::Node {
 public:
  explicit ReshapeBackward(const Shape& shape) : shape_(shape) {}
  std::string_view name() const override { return "reshape_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {grads[0].reshape(shape_)};
  }

 private:
  Shape shape_;
};

class PermuteBackward final : public autograd::Node {
 public:
  explicit PermuteBackward(const std::vector<int>& dims) : inverse_(dims.size()) {
    for (size_t i = 0; i < dims.size(); ++i) inverse_[size_t(dims[i])] = int(i);
  }
  std::string_view name() const override { return "permute_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {grads[0].permute(std::span<const int>(inverse_))};
  }

 private:
  std::vector<int> inverse_;
};

class SliceBackward final : public autograd::Node {
 public:
  SliceBackward(const Shape& shape, int dim, int64_t start, int64_t end)
      : shape_(shape), dim_(dim), start_(start), end_(end) {}
  std::string_view name() const override { return "slice_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    std::vector<Tensor> parts;
    if (start_ > 0) parts.push_back(zeros(shape_.with(dim_, start_), g.dtype(), g.device()));
    parts.push_back(g);
    if (end_ < shape_[dim_])
      parts.push_back(zeros(shape_.with(dim_, shape_[dim_] - end_), g.dtype(), g.device()));
    return {parts.size() == 1 ? g : tessel::concat(parts, dim_)};
  }

 private:
  Shape shape_;
  int dim_;
  int64_t start_, end_;
};

class ConcatBackward final : public autograd::Node {
 public:
  ConcatBackward(std::vector<int64_t> sizes, int dim) : sizes_(std::move(sizes)), dim_(dim) {}
  std::string_view name() const override { return "concat_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return tessel::split(grads[0], sizes_, dim_);
  }

 private:
  std::vector<int64_t> sizes_;
  int dim_;
};

class SplitBackward final : public autograd::Node {
 public:
  explicit SplitBackward(int dim) : dim_(dim) {}
  std::string_view name() const override { return "split_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {tessel::concat(grads, dim_)};
  }

 private:
  int dim_;
};

void check_defined(const Tensor& x, std::string_view op) {
  TESSEL_CHECK(x.defined(), op, ": input is undefined");
}

int checked_dim(const Tensor& x, int dim, std::string_view op) {
  TESSEL_CHECK(dim >= -x.ndim() && dim < x.ndim(), op, ": dim ", dim, " out of range for ",
               detail::describe(x));
  return dim < 0 ? dim + x.ndim() : dim;
}

}  // namespace

Tensor reshape(const Tensor& x, std::span<const int64_t> sizes) {
  check_defined(x, "reshape");
  Tensor y = x.reshape(sizes);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<ReshapeBackward>(x.shape()), {x}, {y});
  return y;
}
Tensor reshape(const Tensor& x, std::initializer_list<int64_t> sizes) {
  return reshape(x, std::span<const int64_t>(sizes.begin(), sizes.size()));
}
Tensor reshape(const Tensor& x, const Shape& shape) {
  return reshape(x, shape.dims());
}
Tensor flatten(const Tensor& x) {
  check_defined(x, "flatten");
  return reshape(x, {x.numel()});
}

Tensor transpose(const Tensor& x, int dim0, int dim1) {
  check_defined(x, "transpose");
  std::vector<int> order(size_t(x.ndim()));
  for (int i = 0; i < x.ndim(); ++i) order[size_t(i)] = i;
  std::swap(order[size_t(checked_dim(x, dim0, "transpose"))],
            order[size_t(checked_dim(x, dim1, "transpose"))]);
  return permute(x, order);
}

Tensor permute(const Tensor& x, const std::vector<int>& dims) {
  check_defined(x, "permute");
  TESSEL_CHECK(int(dims.size()) == x.ndim(), "permute: ", dims.size(), " dims given for ",
               detail::describe(x));
  std::vector<int> normal(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    normal[i] = checked_dim(x, dims[i], "permute");
    TESSEL_CHECK(!seen[size_t(normal[i])], "permute: dim ", dims[i], " repeated for ",
                 detail::describe(x));
    seen[size_t(normal[i])] = true;
  }
  Tensor y = x.permute(std::span<const int>(normal));
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<PermuteBackward>(normal), {x}, {y});
  return y;
}

Tensor slice(const Tensor& x, int dim, int64_t start, int64_t end) {
  check_defined(x, "slice");
  int d = checked_dim(x, dim, "slice");
  TESSEL_CHECK(0 <= start && start <= end && end <= x.size(d), "slice: [", start, ", ", end,
               ") out of range for dim ", d, " of ", detail::describe(x));
  Tensor y = x.slice(d, start, end);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<SliceBackward>(x.shape(), d, start, end), {x}, {y});
  return y;
}

Tensor concat(const std::vector<Tensor>& xs, int dim) {
  TESSEL_CHECK(!xs.empty(), "concat: no tensors given");
  for (size_t i = 0; i < xs.size(); ++i) {
    TESSEL_CHECK(xs[i].defined(), "concat: tensor ", i, " is undefined");
    TESSEL_CHECK(xs[i].dtype() == xs[0].dtype() && xs[i].ndim() == xs[0].ndim(), "concat: tensor ",
                 i, " ", detail::describe(xs[i]), " does not match tensor 0 ",
                 detail::describe(xs[0]));
  }
  int d = checked_dim(xs[0], dim, "concat");
  Tensor y = tessel::concat(std::span<const Tensor>(xs), d);
  if (autograd::needs_grad(std::span<const Tensor>(xs))) {
    std::vector<int64_t> sizes;
    for (const Tensor& t : xs) sizes.push_back(t.size(d));
    autograd::record(std::make_shared<ConcatBackward>(std::move(sizes), d),
                     std::span<const Tensor>(xs), std::span<const Tensor>(&y, 1));
  }
  return y;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim) {
  check_defined(x, "split");
  int d = checked_dim(x, dim, "split");
  std::vector<Tensor> ys = tessel::split(x, sizes, d);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<SplitBackward>(d), std::span<const Tensor>(&x, 1),
                     std::span<const Tensor>(ys));
  return ys;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int dim) {
  check_defined(x, "chunk");
  TESSEL_CHECK(chunks >= 1, "chunk: need at least one chunk, got ", chunks);
  int d = checked_dim(x, dim, "chunk");
  const int64_t n = x.size(d), each = (n + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += each) sizes.push_back(std::min(each, n - start));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, d);
}

}  // namespace tessel::ops
