// SPDX-License-Identifier: Apache-2.0
#include "op_harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::testing {

namespace {
constexpr uint8_t kGuardByte = 0xA5;

bool all_zero(const Tensor& t) {
  Tensor d = t.to(DType::F64);
  const double* p = d.data<double>();
  for (int64_t i = 0; i < d.numel(); ++i)
    if (p[i] != 0) return false;
  return true;
}

// NaN compares as infinitely large.
double max_abs(const Tensor& t) {
  Tensor d = t.to(DType::F64);
  const double* p = d.data<double>();
  double m = 0;
  for (int64_t i = 0; i < d.numel(); ++i)
    m = std::isnan(p[i]) ? INFINITY : std::max(m, std::abs(p[i]));
  return m;
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : s) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}
}  // namespace

double nmse(const Tensor& got, const Tensor& want) {
  TESSEL_CHECK(got.shape() == want.shape(), "nmse: shapes differ: ", got.shape(), " vs ",
               want.shape());
  Tensor g = got.to(DType::F64), w = want.to(DType::F64);
  const double* gp = g.data<double>();
  const double* wp = w.data<double>();
  double err = 0, ref = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    double a = gp[i], b = wp[i];
    if (!std::isfinite(a) || !std::isfinite(b)) {
      if (a == b) continue;  // same infinity
      if (std::isnan(a) && std::isnan(b)) continue;
      return INFINITY;
    }
    err += (a - b) * (a - b);
    ref += b * b;
  }
  if (err == 0) return 0;
  return err / std::max(ref, 1e-300);
}

Tensor guarded_copy(const Tensor& t) {
  size_t es = t.element_size();
  size_t payload = t.nbytes(), guard = size_t(kGuardElements) * es;
  auto storage = std::make_shared<Storage>(payload + 2 * guard, cpu_allocator());
  char* base = static_cast<char*>(storage->data());
  std::memset(base, kGuardByte, guard);
  std::memset(base + guard + payload, kGuardByte, guard);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->offset = kGuardElements;
  impl->shape = t.shape();
  impl->dtype = t.dtype();
  Tensor out(impl);
  if (payload > 0) std::memcpy(out.data_ptr(), t.data_ptr(), payload);
  return out;
}

bool guards_intact(const Tensor& guarded) {
  size_t es = guarded.element_size();
  size_t guard = size_t(kGuardElements) * es;
  TESSEL_CHECK(guarded.offset() == kGuardElements,
               "guards_intact: tensor was not made by guarded_copy");
  const char* base = static_cast<const char*>(guarded.storage().data());
  const char* tail = base + guard + guarded.nbytes();
  for (size_t i = 0; i < guard; ++i)
    if (uint8_t(base[i]) != kGuardByte || uint8_t(tail[i]) != kGuardByte) return false;
  return true;
}

Tensors to_f64(const Tensors& tensors) {
  Tensors out;
  for (const Tensor& t : tensors)
    out.push_back(t.defined() && dtype_is_float(t.dtype()) ? t.to(DType::F64).clone() : t);
  return out;
}

namespace {

// The whole storage of a guarded tensor (guards and payload) as one flat byte tensor.
Tensor whole_storage(const Tensor& guarded) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = guarded.storage_ptr();
  impl->shape = Shape({int64_t(guarded.storage().nbytes())});
  impl->dtype = DType::I8;
  return Tensor(std::move(impl));
}

// A copy of a guarded host tensor on `device`, guards included, viewed like the original.
Tensor guarded_on(const Tensor& guarded, Device device) {
  Tensor flat = whole_storage(guarded);
  Tensor there = empty(flat.shape(), DType::I8, device);
  there.copy_from(flat);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = there.storage_ptr();
  impl->offset = guarded.offset();
  impl->shape = guarded.shape();
  impl->dtype = guarded.dtype();
  return Tensor(std::move(impl));
}

// Copies a device tensor made by guarded_on back over its host original, guards included.
void copy_back(const Tensor& there, const Tensor& guarded) {
  Tensor flat = whole_storage(guarded);
  flat.copy_from(whole_storage(there));
}

}  // namespace

std::string check_op_case(const OpCase& c, kernels::Backend& backend, Device device) {
  Generator gen(name_hash(c.name));
  Tensors inputs = c.make_inputs(gen);
  // The reference sees exactly the values the backend sees (rounded to c.dtype first).
  Tensors ref_inputs = to_f64(inputs);
  Tensors ref_outputs = c.make_outputs(ref_inputs);
  c.run(kernels::reference_backend(), ref_inputs, ref_outputs);

  Tensors initial = c.make_outputs(inputs);
  Tensors outputs;
  for (const Tensor& t : initial) outputs.push_back(t.defined() ? guarded_copy(t) : t);
  // Inputs are guarded too: a kernel must not write into them.
  Tensors guarded_inputs;
  for (const Tensor& t : inputs) guarded_inputs.push_back(t.defined() ? guarded_copy(t) : t);
  if (device.is_cpu()) {
    c.run(backend, guarded_inputs, outputs);
  } else {
    Tensors in_there, out_there;
    for (const Tensor& t : guarded_inputs)
      in_there.push_back(t.defined() ? guarded_on(t, device) : t);
    for (const Tensor& t : outputs) out_there.push_back(t.defined() ? guarded_on(t, device) : t);
    c.run(backend, in_there, out_there);
    for (size_t i = 0; i < in_there.size(); ++i)
      if (in_there[i].defined()) copy_back(in_there[i], guarded_inputs[i]);
    for (size_t i = 0; i < out_there.size(); ++i)
      if (out_there[i].defined()) copy_back(out_there[i], outputs[i]);
  }

  std::ostringstream failures;
  for (size_t i = 0; i < guarded_inputs.size(); ++i) {
    if (!guarded_inputs[i].defined()) continue;
    if (!guards_intact(guarded_inputs[i]))
      failures << "input " << i << ": guard bytes overwritten; ";
    if (nmse(guarded_inputs[i], inputs[i]) != 0) failures << "input " << i << " was modified; ";
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) continue;
    if (!guards_intact(outputs[i])) failures << "output " << i << ": guard bytes overwritten; ";
    if (all_zero(ref_outputs[i])) {
      double m = max_abs(outputs[i]);
      if (!(m <= c.zero_max_abs))
        failures << "output " << i << " " << outputs[i].shape() << ": max |x| " << m
                 << " where the reference is all zero, > " << c.zero_max_abs << "; ";
      continue;
    }
    double e = nmse(outputs[i], ref_outputs[i]);
    if (!(e <= c.max_nmse))
      failures << "output " << i << " " << outputs[i].shape() << ": nmse " << e << " > "
               << c.max_nmse << "; ";
  }
  return failures.str();
}

Tensor random_tensor(Generator& gen, const Shape& shape, DType dtype, double scale) {
  Tensor t = randn(shape, DType::F64, &gen);
  if (scale != 1.0) {
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= scale;
  }
  return t.to(dtype);
}

Tensor random_ids(Generator& gen, const Shape& shape, int64_t vocab, DType dtype) {
  Tensor u = rand(shape, DType::F64, &gen);
  Tensor ids = empty(shape, dtype);
  const double* p = u.data<double>();
  for (int64_t i = 0; i < u.numel(); ++i)
    store_from_double(ids.data_ptr(), dtype, size_t(i), std::floor(p[i] * double(vocab)));
  return ids;
}

std::string shape_tag(std::initializer_list<int64_t> dims) {
  std::string s;
  for (int64_t d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

}  // namespace tessel::testing
