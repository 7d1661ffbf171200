// SPDX-License-Identifier: Apache-2.0
// RoPE inverse frequencies for every rope_scaling type, and the cached cos / sin tables.
#include "tessel/models/llama/llama_rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tessel/core/error.h"
#include "tessel/models/rotary_rows.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::models {

std::vector<double> rope_inv_freq(const LlamaConfig& c, int64_t seq_len) {
  const int64_t d = c.head_dim;
  const RopeScaling& r = c.rope_scaling;
  double base = c.rope_theta;
  if (r.type == RopeScaling::Type::Dynamic) {
    const double m = double(c.max_position_embeddings);
    const double l = std::max(double(seq_len), m);
    base *= std::pow(r.factor * l / m - (r.factor - 1.0), double(d) / double(d - 2));
  }
  std::vector<double> inv(size_t(d / 2));
  for (int64_t i = 0; i < d / 2; ++i)
    inv[size_t(i)] = 1.0 / std::pow(base, double(2 * i) / double(d));
  if (r.type == RopeScaling::Type::Linear) {
    for (double& f : inv) f /= r.factor;
  } else if (r.type == RopeScaling::Type::Llama3) {
    const double old = double(r.original_max_position_embeddings);
    const double low = r.low_freq_factor, high = r.high_freq_factor;
    const double low_wavelen = old / low, high_wavelen = old / high;
    for (double& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= r.factor;
      } else if (!(wavelen < high_wavelen)) {
        const double s = (old / wavelen - low) / (high - low);
        f = (1.0 - s) * f / r.factor + s * f;
      }
    }
  }
  return inv;
}

RotaryTables::RotaryTables(const LlamaConfig& config) : config_(config) {}

std::pair<Tensor, Tensor> RotaryTables::get(int64_t seq_len, DType dtype, Device device) {
  if (device.type == DeviceType::CUDA) {
    const auto [cos, sin] = get(seq_len, dtype);
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = tables_[dtype];
    if (!e.device_cos.defined() || e.device_cos.device() != device ||
        e.device_cos.size(0) != cos.size(0)) {
      e.device_cos = to_device(cos, device);
      e.device_sin = to_device(sin, device);
    }
    return {e.device_cos, e.device_sin};
  }
  TESSEL_CHECK(seq_len >= 1, "RoPE tables: sequence length ", seq_len, " must be >= 1");
  TESSEL_CHECK(dtype == DType::F32 || dtype == DType::F64, "RoPE tables: dtype ", dtype_name(dtype),
               " expected f32 or f64");
  const bool dynamic = config_.rope_scaling.type == RopeScaling::Type::Dynamic;
  // Dynamic scaling keeps the base up to max_position_embeddings and grows it past that: the
  // frequencies then belong to this very length.
  const int64_t key = dynamic && seq_len > config_.max_position_embeddings ? seq_len : 0;
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = tables_[dtype];
  if (e.key == key && e.rows >= seq_len) return {e.cos, e.sin};
  int64_t rows = seq_len;
  if (key == 0) {
    rows = rotary_table_rows(e.rows, seq_len, config_.max_positions());  // models/rotary_rows.h
  }
  const std::vector<double> inv = rope_inv_freq(config_, dynamic ? std::max(key, int64_t(1)) : 1);
  const int64_t half = int64_t(inv.size());
  Tensor cos = empty(Shape{rows, half}, DType::F64), sin = empty(Shape{rows, half}, DType::F64);
  if (cos.device().is_meta()) {  // the model runs on the meta device: the tables' shapes only
    e = {key, rows, cos.to(dtype), sin.to(dtype)};
    return {e.cos, e.sin};
  }
  double* cp = cos.data<double>();
  double* sp = sin.data<double>();
  for (int64_t p = 0; p < rows; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(p) * inv[size_t(i)];
      cp[p * half + i] = std::cos(angle);
      sp[p * half + i] = std::sin(angle);
    }
  }
  e.key = key;
  e.rows = rows;
  e.cos = cos.to(dtype);
  e.sin = sin.to(dtype);
  return {e.cos, e.sin};
}

Tensor rope_positions(int64_t batch, int64_t length, int64_t start, Device device) {
  if (device.type == DeviceType::CUDA)
    return to_device(rope_positions(batch, length, start), device);
  Tensor p = empty(Shape{batch, length}, DType::I64);
  if (p.device().is_meta()) return p;  // built on the meta device: shape only
  int64_t* data = p.data<int64_t>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < length; ++t) data[b * length + t] = start + t;
  return p;
}

}  // namespace tessel::models
