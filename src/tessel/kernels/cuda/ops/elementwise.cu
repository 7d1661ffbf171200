// SPDX-License-Identifier: Apache-2.0
// CUDA unary / binary elementwise kernels: one grid-stride loop per launch, the per-element math
// from kernels/shared/elementwise_math.h. The binary broadcast is first coalesced on the host as
// the CPU kernel does (size-1 dims dropped, dims that step alike in both inputs merged), so the
// common cases (same shape, bias add) index with one or two dims.
#include <array>

#include "tessel/kernels/cuda/ops/common.cuh"
#include "tessel/kernels/cuda/ops/elementwise.h"
#include "tessel/kernels/shared/elementwise_math.h"

namespace tessel::kernels::cuda {

namespace {

using namespace detail;

constexpr int kMaxDims = 8;

struct Broadcast {
  int ndim = 0;
  int64_t size[kMaxDims] = {}, stride_a[kMaxDims] = {}, stride_b[kMaxDims] = {};
};

template <Storage S>
__global__ void unary_kernel(UnaryOp op, const void* x, void* y, int64_t n, float a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store<S>(y, i, shared::unary_f32(op, load<S>(x, i), a));
}

template <Storage S>
__global__ void unary_backward_kernel(UnaryOp op, const void* x, const void* y, const void* dy,
                                      void* dx, int64_t n, float a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float xv = x != nullptr ? load<S>(x, i) : 0.0f;
    const float yv = y != nullptr ? load<S>(y, i) : 0.0f;
    store<S>(dx, i, shared::unary_grad_f32(op, xv, yv, load<S>(dy, i), a));
  }
}

template <Storage S>
__global__ void binary_kernel(BinaryOp op, const void* a, const void* b, void* out, int64_t n,
                              Broadcast p) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, off_a = 0, off_b = 0;
    for (int d = p.ndim - 1; d >= 0; --d) {
      const int64_t idx = rest % p.size[d];
      rest /= p.size[d];
      off_a += idx * p.stride_a[d];
      off_b += idx * p.stride_b[d];
    }
    store<S>(out, i, shared::binary_f32(op, load<S>(a, off_a), load<S>(b, off_b)));
  }
}

// Element strides of t in each of out's dims (right-aligned; 0 where t broadcasts).
std::array<int64_t, kMaxDims> broadcast_strides(std::span<const int64_t> t,
                                                std::span<const int64_t> out) {
  std::array<int64_t, kMaxDims> s{};
  int64_t step = 1;
  const int nd = int(out.size()), td = int(t.size());
  for (int d = nd - 1; d >= 0; --d) {
    const int k = td - nd + d;
    const int64_t size = k >= 0 ? t[size_t(k)] : 1;
    s[size_t(d)] = size == 1 ? 0 : step;
    step *= size;
  }
  return s;
}

Broadcast make_broadcast(std::span<const int64_t> a, std::span<const int64_t> b,
                         std::span<const int64_t> out) {
  TESSEL_CHECK(out.size() <= size_t(kMaxDims) && a.size() <= out.size() && b.size() <= out.size(),
               "binary: shapes of ", a.size(), " and ", b.size(), " dims into ", out.size(),
               " dims (at most ", kMaxDims, ", inputs no more than out)");
  const int nd = int(out.size());
  for (int d = 0; d < nd; ++d) {
    const int ka = int(a.size()) - nd + d, kb = int(b.size()) - nd + d;
    const int64_t sa = ka >= 0 ? a[size_t(ka)] : 1, sb = kb >= 0 ? b[size_t(kb)] : 1;
    const int64_t want = sa == 1 ? sb : sa;
    TESSEL_CHECK((sa == 1 || sb == 1 || sa == sb) && out[size_t(d)] == want, "binary: dim ", d,
                 " of out is ", out[size_t(d)], ", expected the broadcast of ", sa, " and ", sb);
  }
  const auto sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
  Broadcast p;
  for (int d = 0; d < nd; ++d) {
    const int64_t size = out[size_t(d)];
    if (size == 1) continue;
    const int last = p.ndim - 1;
    if (last >= 0 && p.stride_a[last] == sa[size_t(d)] * size &&
        p.stride_b[last] == sb[size_t(d)] * size) {
      p.size[last] *= size;
      p.stride_a[last] = sa[size_t(d)];
      p.stride_b[last] = sb[size_t(d)];
      continue;
    }
    p.size[p.ndim] = size;
    p.stride_a[p.ndim] = sa[size_t(d)];
    p.stride_b[p.ndim] = sb[size_t(d)];
    ++p.ndim;
  }
  if (p.ndim == 0) {
    p.ndim = 1;
    p.size[0] = 1;
  }
  return p;
}

}  // namespace

void unary(UnaryOp op, DType dtype, const void* x, void* y, int64_t n, double alpha,
           cudaStream_t stream) {
  TESSEL_CHECK(n >= 0, "unary: negative element count ", n);
  if (n == 0) return;
  TESSEL_CHECK(x != nullptr && y != nullptr, "unary: null x or y");
  dispatch(dtype, "unary", [&](auto tag) {
    unary_kernel<decltype(tag)::value>
        <<<grid_for(n), kThreads, 0, stream>>>(op, x, y, n, float(alpha));
  });
  check_launch("unary");
}

void unary_backward(UnaryOp op, DType dtype, const void* x, const void* y, const void* dy, void* dx,
                    int64_t n, double alpha, cudaStream_t stream) {
  TESSEL_CHECK(n >= 0, "unary_backward: negative element count ", n);
  if (n == 0) return;
  const bool reads_y = unary_derivative_reads_y(op);
  TESSEL_CHECK(dy != nullptr && dx != nullptr && (reads_y ? y != nullptr : x != nullptr),
               "unary_backward(", unary_name(op), "): null ", reads_y ? "y" : "x", ", dy or dx");
  dispatch(dtype, "unary_backward", [&](auto tag) {
    unary_backward_kernel<decltype(tag)::value><<<grid_for(n), kThreads, 0, stream>>>(
        op, reads_y ? nullptr : x, reads_y ? y : nullptr, dy, dx, n, float(alpha));
  });
  check_launch("unary_backward");
}

void binary(BinaryOp op, DType dtype, const void* a, std::span<const int64_t> a_shape,
            const void* b, std::span<const int64_t> b_shape, void* out,
            std::span<const int64_t> out_shape, cudaStream_t stream) {
  const Broadcast p = make_broadcast(a_shape, b_shape, out_shape);
  int64_t n = 1;
  for (int64_t s : out_shape) n *= s;
  if (n == 0) return;
  TESSEL_CHECK(a != nullptr && b != nullptr && out != nullptr, "binary: null a, b or out");
  dispatch(dtype, "binary", [&](auto tag) {
    binary_kernel<decltype(tag)::value><<<grid_for(n), kThreads, 0, stream>>>(op, a, b, out, n, p);
  });
  check_launch("binary");
}

}  // namespace tessel::kernels::cuda
