// SPDX-License-Identifier: Apache-2.0
// CPU broadcasting binary kernel. The broadcast is reduced to its simplest strided form (size-1
// dims dropped, dims that step alike in both inputs merged): same shapes become one flat loop, a
// bias add [rows, C] + [C] rows of a contiguous loop, [rows, C] * [rows, 1] rows of a scalar
// loop; inner loops are specialised on unit / zero strides so that they vectorise.
#include <array>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/half_kernels.h"
#include "tessel/kernels/cpu/loops.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

// The output's dims after coalescing, with each input's element stride per dim (0: broadcast).
struct Plan {
  int ndim = 0;
  std::array<int64_t, Shape::kMaxDims> size{}, stride_a{}, stride_b{};
};

// Stride of each of `out`'s dims in t (right-aligned; 0 where t has size 1 or lacks the dim).
std::array<int64_t, Shape::kMaxDims> broadcast_strides(const Shape& t, const Shape& out) {
  std::array<int64_t, Shape::kMaxDims> s{};
  int64_t step = 1;
  for (int d = out.ndim() - 1; d >= 0; --d) {
    int td = t.ndim() - out.ndim() + d;
    int64_t size = td >= 0 ? t[td] : 1;
    s[size_t(d)] = size == 1 ? 0 : step;
    step *= size;
  }
  return s;
}

Plan make_plan(const Shape& a, const Shape& b, const Shape& out) {
  auto sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
  Plan p;
  for (int d = 0; d < out.ndim(); ++d) {
    if (out[d] == 1) continue;
    int last = p.ndim - 1;
    // Merge into the previous dim when stepping through it equals stepping `out[d]` times.
    if (last >= 0 && p.stride_a[size_t(last)] == sa[size_t(d)] * out[d] &&
        p.stride_b[size_t(last)] == sb[size_t(d)] * out[d]) {
      p.size[size_t(last)] *= out[d];
      p.stride_a[size_t(last)] = sa[size_t(d)];
      p.stride_b[size_t(last)] = sb[size_t(d)];
      continue;
    }
    p.size[size_t(p.ndim)] = out[d];
    p.stride_a[size_t(p.ndim)] = sa[size_t(d)];
    p.stride_b[size_t(p.ndim)] = sb[size_t(d)];
    ++p.ndim;
  }
  if (p.ndim == 0) {  // a single element
    p.ndim = 1;
    p.size[0] = 1;
  }
  return p;
}

// NaN-propagating max / min, written as selects so they vectorise.
template <typename T>
T max_nan(T a, T b) {
  return (a > b || a != a) ? a : b;
}
template <typename T>
T min_nan(T a, T b) {
  return (a < b || a != a) ? a : b;
}

// out[i] = f(a[i * sa], b[i * sb]) for i < n, specialised on unit / zero strides.
template <typename T, typename F>
void inner_loop(T* out, const T* a, const T* b, int64_t n, int64_t sa, int64_t sb, F f) {
  if (sa == 1 && sb == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T bv = b[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const T av = a[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = f(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i * sa], b[i * sb]);
  }
}

template <typename T, typename F>
void run_plan(const Plan& p, const T* a, const T* b, T* out, int64_t total, F f) {
  const int last = p.ndim - 1;
  const int64_t inner = p.size[size_t(last)];
  parallel_for(0, total, cpu::kElementGrain, [&](int64_t lo, int64_t hi) {
    // Multi-index of element `lo`, then whole or partial inner rows until `hi`.
    std::array<int64_t, Shape::kMaxDims> idx{};
    int64_t rest = lo;
    for (int d = last; d >= 0; --d) {
      idx[size_t(d)] = rest % p.size[size_t(d)];
      rest /= p.size[size_t(d)];
    }
    int64_t pos = lo;
    while (pos < hi) {
      int64_t off_a = 0, off_b = 0;
      for (int d = 0; d <= last; ++d) {
        off_a += idx[size_t(d)] * p.stride_a[size_t(d)];
        off_b += idx[size_t(d)] * p.stride_b[size_t(d)];
      }
      int64_t len = std::min(inner - idx[size_t(last)], hi - pos);
      inner_loop(out + pos, a + off_a, b + off_b, len, p.stride_a[size_t(last)],
                 p.stride_b[size_t(last)], f);
      pos += len;
      idx[size_t(last)] = 0;
      for (int d = last - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < p.size[size_t(d)]) break;
        idx[size_t(d)] = 0;
      }
    }
  });
}

template <typename T>
void binary_impl(BinaryOp op, const Plan& p, const T* a, const T* b, T* out, int64_t total) {
  switch (op) {
    case BinaryOp::Add:
      return run_plan(p, a, b, out, total, [](T x, T y) { return x + y; });
    case BinaryOp::Sub:
      return run_plan(p, a, b, out, total, [](T x, T y) { return x - y; });
    case BinaryOp::Mul:
      return run_plan(p, a, b, out, total, [](T x, T y) { return x * y; });
    case BinaryOp::Div:
      return run_plan(p, a, b, out, total, [](T x, T y) { return x / y; });
    case BinaryOp::Max:
      return run_plan(p, a, b, out, total, [](T x, T y) { return max_nan(x, y); });
    case BinaryOp::Min:
      return run_plan(p, a, b, out, total, [](T x, T y) { return min_nan(x, y); });
  }
  TESSEL_FAIL("binary: unknown op ", int(op));
}

}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  validate_binary(*this, op, a, b, out);
  if (cpu::is_half(a.dtype())) return cpu::half_binary(*this, op, a, b, out);
  if (out.numel() == 0) return;
  Plan plan = make_plan(a.shape(), b.shape(), out.shape());
  cpu::dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    binary_impl<T>(op, plan, a.data<T>(), b.data<T>(), out.data<T>(), out.numel());
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
