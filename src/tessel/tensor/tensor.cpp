// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/tensor.h"

#include <cstring>

#include "tessel/core/threads.h"
#include "tessel/tensor/device_memory.h"
#include "tessel/tensor/meta_copy.h"

namespace tessel {

namespace {
Tensor make_view(const Tensor& base, int64_t offset, const Shape& shape) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage_ptr();
  impl->offset = offset;
  impl->shape = shape;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

void check_cpu(const Tensor& t, const char* what) {
  TESSEL_CHECK(!t.device().is_meta(), what, ": tensor",
               t.name().empty() ? "" : " '" + t.name() + "'", " of shape ", t.shape(), " (",
               dtype_name(t.dtype()), ") is on the meta device and has no data");
  TESSEL_CHECK(t.device().is_cpu(), what, ": tensor is on ", t.device().str(),
               "; only cpu tensors are supported here");
}
// A copy with a CUDA tensor at one end: the bytes move in the source's dtype, the conversion (if
// any) runs on the host side.
void copy_to_or_from_device(const Tensor& src, Tensor& dst) {
  if (src.dtype() == dst.dtype()) {
    copy_across_devices(src, dst);
  } else if (src.device().is_cpu()) {
    copy_across_devices(src.to(dst.dtype()), dst);
  } else {
    Tensor host = empty(src.shape(), src.dtype());
    copy_across_devices(src, host);
    if (dst.device().is_cpu()) {
      dst.copy_from(host);
    } else {
      copy_across_devices(host.to(dst.dtype()), dst);
    }
  }
}
}  // namespace

std::string Tensor::name_suffix() const {
  return impl_ && !impl_->name.empty() ? " '" + impl_->name + "'" : std::string();
}

void* Tensor::data_ptr() const {
  TESSEL_CHECK(!device().is_meta(), "data access to tensor", name_suffix(), " of shape ", shape(),
               " (", dtype_name(dtype()), ") on the meta device, which has no data");
  TESSEL_CHECK(!(device().type == DeviceType::CUDA), "host access to the data of tensor",
               name_suffix(), " of shape ", shape(), " (", dtype_name(dtype()), ") on ",
               device().str(), ": copy it to the host first (to_device(t, Device::cpu()))");
  return static_cast<char*>(storage().data()) + offset() * int64_t(element_size());
}

Tensor Tensor::reshape(std::span<const int64_t> dims) const {
  std::vector<int64_t> sizes(dims.begin(), dims.end());
  auto requested = [&] {
    std::string r = "[";
    for (size_t i = 0; i < dims.size(); ++i) r += (i ? ", " : "") + std::to_string(dims[i]);
    return r + "]";
  };
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      TESSEL_CHECK(infer < 0, "reshape ", shape(), " -> ", requested(), ": more than one -1");
      infer = int(i);
    } else {
      TESSEL_CHECK(sizes[i] >= 0, "reshape ", shape(), " -> ", requested(), ": negative size");
      known *= sizes[i];
    }
  }
  if (infer >= 0) {
    TESSEL_CHECK(known > 0 && numel() % known == 0, "reshape ", shape(), " -> ", requested(),
                 ": cannot infer the -1 dimension");
    sizes[size_t(infer)] = numel() / known;
  }
  Shape s(sizes);
  TESSEL_CHECK(s.numel() == numel(), "reshape", name_suffix(), ": ", shape(), " (", numel(),
               " elements) -> ", requested(), " (", s.numel(), " elements)");
  Tensor v = make_view(*this, offset(), s);
  v.impl_->requires_grad = false;
  return v;
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t length) const {
  int d = shape().normalize_dim(dim);
  TESSEL_CHECK(start >= 0 && length >= 0 && start + length <= size(d), "narrow", name_suffix(),
               ": [", start, ", ", start + length, ") out of range for dim ", d, " of size ",
               size(d));
  for (int i = 0; i < d; ++i)
    TESSEL_CHECK(size(i) == 1, "narrow", name_suffix(), " of ", shape(), " along dim ", d,
                 " is not contiguous (dim ", i, " has size ", size(i), "); use slice() to copy");
  int64_t inner = 1;
  for (int i = d + 1; i < ndim(); ++i) inner *= size(i);
  return make_view(*this, offset() + start * inner, shape().with(d, length));
}

Tensor Tensor::detach() const {
  return make_view(*this, offset(), shape());
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  TESSEL_CHECK(src.shape() == shape(), "copy_from: source shape ", src.shape(),
               " differs from destination shape ", shape());
  if (device().is_meta() || src.device().is_meta()) {
    TESSEL_CHECK(device() == src.device(), "copy_from: between ", src.device().str(), " and ",
                 device().str(), " tensors of shape ", shape(), " (meta tensors have no data)");
    if (!is_same(src))
      report_meta_copy(src.dtype() == dtype() ? "copy" : "convert", {src}, {*this});
    return;
  }
  if (device().type == DeviceType::CUDA || src.device().type == DeviceType::CUDA) {
    copy_to_or_from_device(src, *this);
    return;
  }
  check_cpu(*this, "copy_from");
  check_cpu(src, "copy_from");
  if (src.dtype() == dtype()) {
    if (src.data_ptr() != data_ptr()) std::memmove(data_ptr(), src.data_ptr(), nbytes());
    return;
  }
  const char* s = static_cast<const char*>(src.data_ptr());
  char* d = static_cast<char*>(data_ptr());
  size_t ss = src.element_size(), ds = element_size();
  parallel_for(0, numel(), 1 << 16, [&](int64_t lo, int64_t hi) {
    convert_elements(s + lo * ss, src.dtype(), d + lo * ds, dtype(), size_t(hi - lo));
  });
}

void Tensor::fill(double value) {
  if (device().is_meta()) {
    report_meta_copy("fill", {}, {*this});
    return;
  }
  if (device().type == DeviceType::CUDA) {
    fill_on_device(*this, value);
    return;
  }
  check_cpu(*this, "fill");
  if (numel() == 0) return;
  store_from_double(data_ptr(), dtype(), 0, value);
  size_t es = element_size();
  char* d = static_cast<char*>(data_ptr());
  parallel_for(1, numel(), 1 << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) std::memcpy(d + i * es, d, es);
  });
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target, device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t end) const {
  int d = shape().normalize_dim(dim);
  TESSEL_CHECK(0 <= start && start <= end && end <= size(d), "slice", name_suffix(), ": [", start,
               ", ", end, ") out of range for dim ", d, " of size ", size(d));
  std::vector<Tensor> parts =
      split(*this, std::vector<int64_t>{start, end - start, size(d) - end}, d);
  return parts[1];
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  std::vector<int> order(static_cast<size_t>(ndim()));
  for (int i = 0; i < ndim(); ++i) order[size_t(i)] = i;
  std::swap(order[size_t(shape().normalize_dim(dim0))], order[size_t(shape().normalize_dim(dim1))]);
  return permute(order);
}

Tensor Tensor::permute(std::span<const int> dims) const {
  if (!device().is_meta()) check_cpu(*this, "permute");
  TESSEL_CHECK(int(dims.size()) == ndim(), "permute of ", shape(), ": got ", dims.size(),
               " dims, expected ", ndim());
  std::vector<bool> seen(static_cast<size_t>(ndim()), false);
  Shape out_shape;
  for (int d : dims) {
    int nd = shape().normalize_dim(d);
    TESSEL_CHECK(!seen[size_t(nd)], "permute of ", shape(), ": dim ", d, " repeated");
    seen[size_t(nd)] = true;
    out_shape.push_back(size(nd));
  }
  Tensor out = empty(out_shape, dtype(), device());
  if (device().is_meta()) {
    report_meta_copy("permute", {*this}, {out});
    return out;
  }
  if (numel() == 0) return out;
  // Source strides in output order; walk the output contiguously.
  std::vector<int64_t> in_strides = shape().strides(), src_stride(dims.size());
  for (size_t i = 0; i < dims.size(); ++i)
    src_stride[i] = in_strides[size_t(shape().normalize_dim(dims[i]))];
  const int n = ndim();
  const size_t es = element_size();
  const char* src = static_cast<const char*>(data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t last = n > 0 ? out_shape[n - 1] : 1;
  const int64_t rows = numel() / last;
  parallel_for(0, rows, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      int64_t rem = r, src_off = 0;
      for (int i = n - 2; i >= 0; --i) {
        int64_t c = rem % out_shape[i];
        rem /= out_shape[i];
        src_off += c * src_stride[size_t(i)];
      }
      int64_t ls = n > 0 ? src_stride[size_t(n - 1)] : 1;
      char* drow = dst + r * last * int64_t(es);
      if (es == 4) {
        auto* d4 = reinterpret_cast<uint32_t*>(drow);
        auto* s4 = reinterpret_cast<const uint32_t*>(src) + src_off;
        for (int64_t j = 0; j < last; ++j) d4[j] = s4[j * ls];
      } else {
        for (int64_t j = 0; j < last; ++j)
          std::memcpy(drow + j * int64_t(es), src + (src_off + j * ls) * int64_t(es), es);
      }
    }
  });
  return out;
}

double Tensor::item() const {
  TESSEL_CHECK(numel() == 1, "item()", name_suffix(), ": tensor has ", numel(),
               " elements, expected 1");
  check_cpu(*this, "item");
  return load_as_double(data_ptr(), dtype(), 0);
}

double Tensor::at(std::span<const int64_t> index) const {
  TESSEL_CHECK(int(index.size()) == ndim(), "at(): ", index.size(), " indices for shape ", shape());
  check_cpu(*this, "at");
  int64_t flat = 0;
  for (int i = 0; i < ndim(); ++i) {
    TESSEL_CHECK(index[size_t(i)] >= 0 && index[size_t(i)] < size(i), "at(): index ",
                 index[size_t(i)], " out of range for dim ", i, " of shape ", shape());
    flat = flat * size(i) + index[size_t(i)];
  }
  return load_as_double(data_ptr(), dtype(), size_t(flat));
}

Tensor& Tensor::set_requires_grad(bool value) {
  TESSEL_CHECK(!value || dtype_is_float(dtype()), "requires_grad needs a floating dtype, tensor",
               name_suffix(), " is ", dtype_name(dtype()));
  impl().requires_grad = value;
  return *this;
}

}  // namespace tessel
