// SPDX-License-Identifier: Apache-2.0
// KVCache: fixed-capacity per-layer key/value buffers written in place as tokens arrive.
#include "tessel/models/kv_cache.h"

#include <cstring>

#include "tessel/autograd/meta.h"
#include "tessel/ops/attention.h"
#include "tessel/ops/paged_attention.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::models {

KVCache::KVCache(int64_t n_layer, int64_t batch, int64_t capacity, int64_t n_head, int64_t head_dim,
                 DType dtype, Device device)
    : batch_(batch),
      capacity_(capacity),
      n_head_(n_head),
      head_dim_(head_dim),
      dtype_(dtype),
      device_(device) {
  TESSEL_CHECK(n_layer > 0 && batch > 0 && capacity > 0 && n_head > 0 && head_dim > 0,
               "KVCache: n_layer ", n_layer, ", batch ", batch, ", capacity ", capacity,
               ", n_head ", n_head, ", head_dim ", head_dim, " must all be positive");
  TESSEL_CHECK(dtype_is_float(dtype), "KVCache: dtype ", dtype_name(dtype),
               " expected a floating type");
  const Shape shape{batch, capacity, n_head, head_dim};
  for (int64_t l = 0; l < n_layer; ++l) {
    keys_.push_back(empty(shape, dtype, device));
    values_.push_back(empty(shape, dtype, device));
  }
}

std::pair<Tensor, Tensor> KVCache::append(int64_t layer, const Tensor& k, const Tensor& v) {
  const int64_t end = store(layer, k, v);
  if (batch_ == 1) return {keys_[layer].narrow(1, 0, end), values_[layer].narrow(1, 0, end)};
  return {keys_[layer].slice(1, 0, end), values_[layer].slice(1, 0, end)};
}

int64_t KVCache::store(int64_t layer, const Tensor& k, const Tensor& v) {
  TESSEL_CHECK(layer >= 0 && layer < n_layer(), "KVCache.append: layer ", layer, " outside [0, ",
               n_layer(), ")");
  TESSEL_CHECK(k.shape() == v.shape() && k.ndim() == 4 && k.size(0) == batch_ &&
                   k.size(2) == n_head_ && k.size(3) == head_dim_,
               "KVCache.append: k ", k.shape(), " and v ", v.shape(), " expected [", batch_,
               ", T, ", n_head_, ", ", head_dim_, "]");
  TESSEL_CHECK(k.dtype() == dtype_ && v.dtype() == dtype_, "KVCache.append: k ",
               dtype_name(k.dtype()), " and v ", dtype_name(v.dtype()), " expected ",
               dtype_name(dtype_));
  const int64_t t = k.size(1), end = length_ + t;
  TESSEL_CHECK(t >= 1 && end <= capacity_, "KVCache.append: ", t, " tokens after ", length_,
               " cached exceed the capacity ", capacity_);
  // Row b of a [B, T, H, D] input is one contiguous run; it lands at position `length_` of row b.
  const size_t row = size_t(t * n_head_ * head_dim_) * dtype_size(dtype_);
  const size_t token = size_t(n_head_ * head_dim_) * dtype_size(dtype_);
  auto write = [&](const Tensor& src, const Tensor& dst) {
    if (dst.device().is_meta()) return;  // shape-only (the planner's serving memory trace)
    TESSEL_CHECK(src.device() == dst.device(), "KVCache.append: k / v on ", src.device().str(),
                 ", the cache on ", dst.device().str());
    if (dst.device().type == DeviceType::CUDA) {
      // The same runs as below, queued as one 2-D copy on the device's stream.
      copy_rows_on_device(dst.device(), device_data(src), row,
                          static_cast<char*>(device_data(dst)) + size_t(length_) * token,
                          size_t(capacity_) * token, row, size_t(batch_));
      return;
    }
    const auto* s = static_cast<const char*>(src.data_ptr());
    auto* d = static_cast<char*>(dst.data_ptr());
    for (int64_t b = 0; b < batch_; ++b) {
      std::memcpy(d + (size_t(b * capacity_) + size_t(length_)) * token, s + size_t(b) * row, row);
    }
  };
  write(k, keys_[layer]);
  write(v, values_[layer]);
  return end;
}

void KVCache::advance(int64_t tokens) {
  TESSEL_CHECK(tokens >= 0 && length_ + tokens <= capacity_, "KVCache.advance: ", tokens,
               " tokens after ", length_, " cached exceed the capacity ", capacity_);
  length_ += tokens;
}

Tensor KVCache::positions(int64_t batch, int64_t tokens) const {
  TESSEL_CHECK(batch == batch_ && tokens >= 1, "KVCache.positions: ", batch, " x ", tokens,
               " tokens for a cache of batch ", batch_);
  Tensor p = empty(Shape{batch, tokens}, DType::I64);
  if (p.device().is_meta()) return p;  // shape-only: the same tensor, no values
  int64_t* data = p.data<int64_t>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < tokens; ++t) data[b * tokens + t] = length_ + t;
  return to_device(p, device_);
}

int64_t KVCache::position_end(int64_t batch, int64_t tokens) const {
  TESSEL_CHECK(batch == batch_, "KVCache: a step of batch ", batch, " for a cache of batch ",
               batch_);
  // Checked before the step does any work, so a failed step commits nothing.
  TESSEL_CHECK(tokens >= 1 && length_ + tokens <= capacity_, "KVCache: ", tokens,
               " new tokens after ", length_, " cached exceed the capacity ", capacity_);
  return length_ + tokens;
}

Tensor KVCache::attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                       int64_t window) {
  const int64_t t = q.size(1);
  if (t >= kPagedRows || keys_[layer].device().type == DeviceType::CUDA ||
      autograd::needs_grad({q, k, v})) {
    auto [keys, values] = append(layer, k, v);
    // Tq < Tk: query i sits at position length + i (causal and windowed from there).
    return ops::attention(q, keys, values, /*causal=*/true, Tensor(), 0.0, window);
  }
  // A decode step: the buffers are the paged kernel's pools with one block of `capacity` rows
  // per sequence, so the keys are read in place (no copy of the cache when B > 1) by the kernel
  // the serving engine decodes with, which reads a position's heads as one run.
  const int64_t end = store(layer, k, v);
  // The buffers' device: meta under the planner's trace even when the model's is the host.
  const Device device = keys_[layer].device();
  Tensor tables = empty({batch_, 1}, DType::I32, device);
  Tensor lens = empty({batch_}, DType::I64, device);
  Tensor starts = empty({batch_ + 1}, DType::I64, device);
  if (!device.is_meta()) {  // shape-only on meta (the planner's serving memory trace)
    for (int64_t b = 0; b < batch_; ++b) {
      tables.data<int32_t>()[b] = int32_t(b);
      lens.data<int64_t>()[b] = end;
    }
    for (int64_t b = 0; b <= batch_; ++b) starts.data<int64_t>()[b] = b * t;
  }
  const int64_t heads = q.size(2);
  Tensor out = ops::paged_attention(q.reshape({batch_ * t, heads, head_dim_}), keys_[layer],
                                    values_[layer], tables, lens, starts, {0.0, window});
  return out.reshape({batch_, t, heads, head_dim_});
}

size_t KVCache::nbytes() const {
  size_t n = 0;
  for (const Tensor& t : keys_) n += t.nbytes();
  for (const Tensor& t : values_) n += t.nbytes();
  return n;
}

}  // namespace tessel::models
