// SPDX-License-Identifier: Apache-2.0
// Reduction loops per dtype. Half types go through f32; integer sums wrap (as MPI and NCCL do in
// practice) instead of being undefined behaviour.
#include "tessel/dist/reduce.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::dist {

namespace {

template <typename T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return T(U(U(a) + U(b)));
  } else {
    return a + b;
  }
}

template <typename T>
constexpr bool kHalf = std::is_same_v<T, BF16> || std::is_same_v<T, F16>;

template <typename T>
void reduce_typed(std::span<const void* const> inputs, void* out, int64_t count, ReduceOp op) {
  const size_t n = inputs.size();
  T* dst = static_cast<T*>(out);
  auto src = [&](size_t r) { return static_cast<const T*>(inputs[r]); };
  if constexpr (kHalf<T>) {
    constexpr int64_t kBlock = 1024;  // f32 accumulator per block keeps the work in cache
    float acc[kBlock];
    for (int64_t b = 0; b < count; b += kBlock) {
      int64_t m = std::min(kBlock, count - b);
      for (int64_t i = 0; i < m; ++i) acc[i] = to_float(src(0)[b + i]);
      for (size_t r = 1; r < n; ++r) {
        const T* s = src(r) + b;
        if (op == ReduceOp::Max) {
          for (int64_t i = 0; i < m; ++i) acc[i] = std::max(acc[i], to_float(s[i]));
        } else {
          for (int64_t i = 0; i < m; ++i) acc[i] += to_float(s[i]);
        }
      }
      if (op == ReduceOp::Avg)
        for (int64_t i = 0; i < m; ++i) acc[i] /= float(n);
      for (int64_t i = 0; i < m; ++i) dst[b + i] = from_float<T>(acc[i]);
    }
  } else {
    for (int64_t i = 0; i < count; ++i) {
      T a = src(0)[i];
      for (size_t r = 1; r < n; ++r)
        a = op == ReduceOp::Max ? std::max(a, src(r)[i]) : wrap_add(a, src(r)[i]);
      if constexpr (std::is_floating_point_v<T>) {
        if (op == ReduceOp::Avg) a /= T(n);
      }
      dst[i] = a;
    }
  }
}

template <typename T>
void combine_typed(const void* in, void* inout, int64_t count, ReduceOp op) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int64_t i = 0; i < count; ++i) {
    if constexpr (kHalf<T>) {
      float x = to_float(a[i]), y = to_float(b[i]);
      b[i] = from_float<T>(op == ReduceOp::Max ? std::max(x, y) : x + y);
    } else {
      b[i] = op == ReduceOp::Max ? std::max(a[i], b[i]) : wrap_add(a[i], b[i]);
    }
  }
}

}  // namespace

void reduce_buffers(std::span<const void* const> inputs, void* out, int64_t count, DType dtype,
                    ReduceOp op) {
  TESSEL_CHECK(!inputs.empty(), "reduce_buffers: no inputs");
  TESSEL_CHECK(op != ReduceOp::Avg || dtype_is_float(dtype),
               "reduce: avg needs a floating dtype, got ", dtype_name(dtype));
  dispatch_dtype(dtype, [&](auto tag) { reduce_typed<decltype(tag)>(inputs, out, count, op); });
}

void combine_into(const void* in, void* inout, int64_t count, DType dtype, ReduceOp op) {
  TESSEL_CHECK(op != ReduceOp::Avg, "combine_into: avg is a sum followed by divide_by");
  dispatch_dtype(dtype, [&](auto tag) { combine_typed<decltype(tag)>(in, inout, count, op); });
}

void divide_by(void* data, int64_t count, DType dtype, int n) {
  TESSEL_CHECK(dtype_is_float(dtype), "divide_by: avg needs a floating dtype, got ",
               dtype_name(dtype));
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(data);
    if constexpr (kHalf<T>) {
      for (int64_t i = 0; i < count; ++i) p[i] = from_float<T>(to_float(p[i]) / float(n));
    } else if constexpr (std::is_floating_point_v<T>) {
      for (int64_t i = 0; i < count; ++i) p[i] /= T(n);
    }
  });
}

}  // namespace tessel::dist
