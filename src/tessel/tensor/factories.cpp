// SPDX-License-Identifier: Apache-2.0
// Tensor factories and the copy-based joins (concat, split).
#include <cmath>
#include <cstring>

#include "tessel/core/threads.h"
#include "tessel/tensor/default_device.h"
#include "tessel/tensor/device_memory.h"
#include "tessel/tensor/meta_allocator.h"
#include "tessel/tensor/meta_copy.h"
#include "tessel/tensor/tensor.h"

namespace tessel {

Tensor empty(const Shape& shape, DType dtype, Device device) {
  if (device.is_cpu()) device = default_device();
  TESSEL_CHECK(device.is_cpu() || device.is_meta() || device.type == DeviceType::CUDA,
               "empty: device ", device.str(), " has no allocator in this build");
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = size_t(shape.numel()) * dtype_size(dtype);
  // A meta tensor's storage knows its size and owns no memory (Tensor::data_ptr refuses it); the
  // meta allocator counts the bytes it stands for while it holds them (released and materialised
  // again as ZeRO-3 does).
  if (device.is_meta()) {
    impl->storage = std::make_shared<Storage>(nbytes, meta_allocator());
  } else if (device.type == DeviceType::CUDA) {
    impl->storage = std::make_shared<Storage>(nbytes, device_allocator(device));
  } else {
    impl->storage = std::make_shared<Storage>(nbytes, cpu_allocator());
  }
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.device().is_meta()) {
    report_meta_copy("fill", {}, {t});
    return t;
  }
  if (t.device().type == DeviceType::CUDA) {
    t.fill(0.0);
    return t;
  }
  if (t.nbytes() > 0)
    std::memset(t.data_ptr(), 0, t.nbytes());  // all-zero bits is 0 for every dtype
  return t;
}

Tensor ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill(value);
  return t;
}

Tensor arange(double start, double end, double step, DType dtype) {
  TESSEL_CHECK(step != 0.0, "arange: step must be non-zero");
  double count = std::ceil((end - start) / step);
  int64_t n = count > 0 ? int64_t(count) : 0;
  Tensor t = empty({n}, dtype);
  if (t.device().is_meta()) return t;
  for (int64_t i = 0; i < n; ++i)
    store_from_double(t.data_ptr(), dtype, size_t(i), start + double(i) * step);
  return t;
}

namespace {
template <typename Draw>
Tensor random_tensor(const Shape& shape, DType dtype, Generator* generator, Draw draw) {
  TESSEL_CHECK(dtype_is_float(dtype), "random tensors need a floating dtype, got ",
               dtype_name(dtype));
  if (default_device().is_meta()) return empty(shape, dtype);  // no values to draw
  Generator& gen = generator ? *generator : default_generator();
  uint64_t seed = gen.seed();
  uint64_t offset = gen.reserve(uint64_t(shape.numel()));
  Tensor t = empty(shape, dtype);
  void* p = t.data_ptr();
  parallel_for(0, shape.numel(), 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      store_from_double(p, dtype, size_t(i), draw(seed, offset, uint64_t(i)));
  });
  return t;
}
}  // namespace

Tensor randn(const Shape& shape, DType dtype, Generator* generator) {
  return random_tensor(shape, dtype, generator, normal_at);
}

Tensor rand(const Shape& shape, DType dtype, Generator* generator) {
  return random_tensor(shape, dtype, generator, uniform_at);
}

Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), t.dtype(), t.device());
}
Tensor empty_like(const Tensor& t) {
  return empty(t.shape(), t.dtype(), t.device());
}

namespace {
// Sizes of the dims before `dim` and after it.
std::pair<int64_t, int64_t> outer_inner(const Shape& s, int dim) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= s[i];
  for (int i = dim + 1; i < s.ndim(); ++i) inner *= s[i];
  return {outer, inner};
}

// `rows` runs of `width` bytes from src (src_pitch apart) to dst (dst_pitch apart) on `device`:
// what split and concat move, on the host or as one 2-D copy on a CUDA device.
void copy_rows(Device device, const char* src, size_t src_pitch, char* dst, size_t dst_pitch,
               size_t width, size_t rows) {
  if (width == 0 || rows == 0) return;
  if (device.type == DeviceType::CUDA)
    return copy_rows_on_device(device, src, src_pitch, dst, dst_pitch, width, rows);
  for (size_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_pitch, src + r * src_pitch, width);
}
}  // namespace

Tensor concat(std::span<const Tensor> tensors, int dim) {
  TESSEL_CHECK(!tensors.empty(), "concat: no tensors given");
  const Tensor& first = tensors[0];
  int d = first.shape().normalize_dim(dim);
  int64_t total = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    TESSEL_CHECK(t.dtype() == first.dtype(), "concat: tensor ", k, " is ", dtype_name(t.dtype()),
                 ", tensor 0 is ", dtype_name(first.dtype()));
    TESSEL_CHECK(t.ndim() == first.ndim(), "concat: tensor ", k, " has shape ", t.shape(),
                 ", tensor 0 has ", first.shape());
    for (int i = 0; i < t.ndim(); ++i)
      TESSEL_CHECK(i == d || t.size(i) == first.size(i), "concat along dim ", d, ": tensor ", k,
                   " has shape ", t.shape(), ", tensor 0 has ", first.shape());
    total += t.size(d);
  }
  Tensor out = empty(first.shape().with(d, total), first.dtype(), first.device());
  if (first.device().is_meta()) {
    for (const Tensor& t : tensors)
      TESSEL_CHECK(t.device().is_meta(), "concat: tensor 0 is on meta, another on ",
                   t.device().str());
    report_meta_copy("concat", tensors, std::span<const Tensor>(&out, 1));
    return out;
  }
  auto [outer, inner] = outer_inner(out.shape(), d);
  const size_t es = out.element_size();
  char* dst = static_cast<char*>(device_data(out));
  int64_t col = 0;
  for (const Tensor& t : tensors) {
    TESSEL_CHECK(t.device() == first.device(), "concat: tensor 0 is on ", first.device().str(),
                 ", another on ", t.device().str());
    const size_t block = size_t(t.size(d) * inner) * es;
    copy_rows(out.device(), static_cast<const char*>(device_data(t)), block,
              dst + size_t(col * inner) * es, size_t(total * inner) * es, block, size_t(outer));
    col += t.size(d);
  }
  return out;
}

Tensor concat(std::initializer_list<Tensor> tensors, int dim) {
  return concat(std::span<const Tensor>(tensors.begin(), tensors.size()), dim);
}

std::vector<Tensor> split(const Tensor& t, std::span<const int64_t> sizes, int dim) {
  int d = t.shape().normalize_dim(dim);
  int64_t sum = 0;
  for (int64_t s : sizes) {
    TESSEL_CHECK(s >= 0, "split: negative size ", s);
    sum += s;
  }
  TESSEL_CHECK(sum == t.size(d), "split of ", t.shape(), " along dim ", d, ": sizes sum to ", sum,
               ", expected ", t.size(d));
  std::vector<Tensor> out;
  if (t.device().is_meta()) {
    for (int64_t s : sizes) out.push_back(empty(t.shape().with(d, s), t.dtype(), t.device()));
    report_meta_copy("split", std::span<const Tensor>(&t, 1), out);
    return out;
  }
  auto [outer, inner] = outer_inner(t.shape(), d);
  const size_t es = t.element_size();
  const char* src = static_cast<const char*>(device_data(t));
  int64_t col = 0;
  for (int64_t s : sizes) {
    Tensor piece = empty(t.shape().with(d, s), t.dtype(), t.device());
    const size_t block = size_t(s * inner) * es;
    copy_rows(t.device(), src + size_t(col * inner) * es, size_t(t.size(d) * inner) * es,
              static_cast<char*>(device_data(piece)), block, block, size_t(outer));
    out.push_back(piece);
    col += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int dim) {
  TESSEL_CHECK(chunks >= 1, "chunk: need at least one chunk, got ", chunks);
  int64_t n = t.size(dim);
  int64_t each = (n + chunks - 1) / chunks;  // torch.chunk's rule: the last pieces may be short
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += each) sizes.push_back(std::min(each, n - start));
  if (sizes.empty()) sizes.push_back(0);
  return split(t, sizes, dim);
}

}  // namespace tessel
