// SPDX-License-Identifier: Apache-2.0
// Tensor: a shared handle to (shape, dtype, storage + element offset). Tensors are always
// contiguous and row-major; a view exists only where it is free (reshape, narrow along a
// contiguous range), every other rearrangement (transpose, permute, slice, concat) copies.
// Methods here never record gradients: the differentiable forms are in tessel::ops.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/core/rng.h"
#include "tessel/core/shape.h"
#include "tessel/tensor/device.h"
#include "tessel/tensor/storage.h"

namespace tessel {

// Gradient-graph state that only the autograd layer interprets (grad_fn, hooks). The tensor
// layer just carries it.
struct AutogradMetaBase {
  virtual ~AutogradMetaBase() = default;
};

class Tensor;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  DType dtype = DType::F32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf, as a Tensor impl
  std::shared_ptr<AutogradMetaBase> autograd;
  std::string name;  // optional, for debugging and error messages
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int ndim() const { return shape().ndim(); }
  int64_t size(int dim) const { return shape()[dim]; }
  int64_t numel() const { return shape().numel(); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  size_t element_size() const { return dtype_size(dtype()); }
  int64_t offset() const { return impl().offset; }
  Storage& storage() const { return *impl().storage; }
  const std::shared_ptr<Storage>& storage_ptr() const { return impl().storage; }

  void* data_ptr() const;
  template <typename T>
  T* data() const {
    TESSEL_CHECK(DTypeOf<T>::value == dtype(), "tensor", name_suffix(), " holds ",
                 dtype_name(dtype()), ", accessed as ", dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(data_ptr());
  }

  // --- views (share storage) ---
  Tensor reshape(const Shape& shape) const { return reshape(shape.dims()); }
  Tensor reshape(std::initializer_list<int64_t> dims) const {
    return reshape(std::span<const int64_t>(dims.begin(), dims.size()));
  }
  Tensor reshape(std::span<const int64_t> dims) const;  // one dim may be -1
  Tensor flatten() const { return reshape({numel()}); }
  // [start, start + length) along dim; legal only where the result is contiguous in memory
  // (every dim before `dim` has size 1). Throws Error otherwise: use slice() to copy.
  Tensor narrow(int dim, int64_t start, int64_t length) const;
  Tensor detach() const;  // same storage, no autograd state

  // --- copies ---
  Tensor clone() const;
  Tensor contiguous_copy() const { return clone(); }
  Tensor slice(int dim, int64_t start, int64_t end) const;
  Tensor transpose(int dim0, int dim1) const;
  Tensor permute(std::span<const int> dims) const;
  Tensor permute(std::initializer_list<int> dims) const {
    return permute(std::span<const int>(dims.begin(), dims.size()));
  }
  Tensor to(DType dtype) const;       // returns *this when the dtype already matches
  void copy_from(const Tensor& src);  // same shape; converts dtype
  void fill(double value);

  // --- host access ---
  double item() const;  // single-element tensors only
  double at(std::span<const int64_t> index) const;
  template <typename T>
  std::vector<T> to_vector() const {
    Tensor t = to(DTypeOf<T>::value);
    const T* p = t.data<T>();
    return std::vector<T>(p, p + numel());
  }
  std::string str(int64_t max_per_dim = 6) const;  // "tensor(f32, [2, 3]) [[...]]"

  // --- autograd state (interpreted by tessel::autograd) ---
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool value = true);
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& grad) { impl().grad = grad.impl_; }
  AutogradMetaBase* autograd_meta() const { return impl().autograd.get(); }
  void set_autograd_meta(std::shared_ptr<AutogradMetaBase> meta) {
    impl().autograd = std::move(meta);
  }
  const std::string& name() const { return impl().name; }
  Tensor& set_name(std::string name) {
    impl().name = std::move(name);
    return *this;
  }

  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  TensorImpl& impl() const {
    TESSEL_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  std::string name_suffix() const;
  std::shared_ptr<TensorImpl> impl_;
};

// --- factories ---
Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
            Device device = Device::cpu());
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::F32);
// Random draws take their numbers from a Generator (default: the process-wide one) and are
// identical for any thread count.
Tensor randn(const Shape& shape, DType dtype = DType::F32, Generator* generator = nullptr);
Tensor rand(const Shape& shape, DType dtype = DType::F32,
            Generator* generator = nullptr);  // [0, 1)
Tensor zeros_like(const Tensor& t);
Tensor empty_like(const Tensor& t);

// Copies host values into a new tensor of the given shape (numel must match).
template <typename T>
Tensor from_data(std::span<const T> values, const Shape& shape) {
  TESSEL_CHECK(int64_t(values.size()) == shape.numel(), "from_data: ", values.size(),
               " values for shape ", shape, " (", shape.numel(), " elements)");
  Tensor t = empty(shape, DTypeOf<T>::value);
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}
template <typename T>
Tensor from_data(const std::vector<T>& values, const Shape& shape) {
  return from_data(std::span<const T>(values), shape);
}

// Joins tensors along dim (all other sizes equal, one dtype).
Tensor concat(std::span<const Tensor> tensors, int dim);
Tensor concat(std::initializer_list<Tensor> tensors, int dim);
// Splits along dim into pieces of the given sizes (summing to the size of dim); copies.
std::vector<Tensor> split(const Tensor& t, std::span<const int64_t> sizes, int dim);
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int dim);

}  // namespace tessel
