// SPDX-License-Identifier: Apache-2.0
// CPU LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019) over the last dim, forward
// and backward, parallel over rows; statistics accumulate in double, also for f32. Built without
// FMA contraction (see CMakeLists.txt) so that backward's differences round as written.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

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

// An optional per-column parameter as a pointer, substituting `fill` when it is undefined.
template <typename T>
const T* param_or(const Tensor& t, std::vector<T>& storage, int64_t cols, T fill) {
  if (t.defined()) return t.data<T>();
  storage.assign(size_t(cols), fill);
  return storage.data();
}

template <typename T>
T* optional_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Splits rows into a number of blocks that depends only on the problem size.
int64_t row_blocks(RowShape r) {
  constexpr int64_t kMaxBlocks = 32;
  int64_t by_work = (r.rows * r.cols) / cpu::kElementGrain;
  return std::max<int64_t>(1, std::min({by_work, r.rows, kMaxBlocks}));
}

// Weight / bias gradients are summed per fixed block of rows into double partials, then combined
// in block order, so they do not depend on the thread count.
// Runs fn(row_lo, row_hi, partial) for each block of rows, where `partial` holds `width` doubles
// per block (zeroed), then sums the blocks' partials in order into `total` (size width).
template <typename Fn>
void blocked_rows(RowShape r, int64_t width, std::vector<double>& total, Fn fn) {
  int64_t blocks = row_blocks(r);
  std::vector<double> partial(size_t(blocks * width), 0.0);
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b)
      fn(r.rows * b / blocks, r.rows * (b + 1) / blocks, partial.data() + b * width);
  });
  total.assign(size_t(width), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t c = 0; c < width; ++c) total[size_t(c)] += partial[size_t(b * width + c)];
}

// The per-row kernels take plain pointers: the loops then read no pointer through a closure
// that the stores could alias, and the compiler vectorises them.

// Forward elementwise work stays in T: it is the bandwidth-bound hot path.

// One LayerNorm row; returns {mean, rstd} as stored.
template <typename T>
std::pair<T, T> layer_norm_row(const T* x, const T* w, const T* b, double eps, int64_t n, T* y) {
  // One pass over data shifted by its first element (the "shifted data" variance): with the
  // shift within a few std of the mean, s2/n - (s1/n)^2 loses only a few bits of a double.
  const double shift = n > 0 ? double(x[0]) : 0.0;
  double s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
  for (int64_t c = 0; c < n; ++c) {
    double d = double(x[c]) - shift;
    s1 += d;
    s2 += d * d;
  }
  const double m1 = s1 / double(n);
  const double var = std::max(s2 / double(n) - m1 * m1, 0.0);
  const double mean_exact = shift + m1;
  // x - mu is exact in T for x near mu (Sterbenz), but mu rounded to T is off by up to half an
  // ulp of the mean, which matters when |mean| >> std; `delta` puts that back.
  const T mu = T(mean_exact);
  const T delta = T(mean_exact - double(mu));
  const T rs = T(1.0 / std::sqrt(var + eps));
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) y[c] = ((x[c] - mu) - delta) * rs * w[c] + b[c];
  return {mu, rs};
}

// Backward works in double per element: dx is a difference of nearly equal terms (exactly 0 for
// one-element rows), and products of f32 values are exact in double.

// One LayerNorm backward row: dx, and (when pdw is non-null) the row's dweight / dbias terms
// added to pdw / pdb.
template <typename T>
void layer_norm_backward_row(const T* dy, const T* x, const T* w, double mu, double rs, int64_t n,
                             T* dx, double* pdw, double* pdb) {
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight.
  double sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int64_t c = 0; c < n; ++c) {
    double g = double(dy[c]) * double(w[c]);
    double xhat = (double(x[c]) - mu) * rs;
    sum_g += g;
    sum_gx += g * xhat;
  }
  const double mean_g = sum_g / double(n), mean_gx = sum_gx / double(n);
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    double g = double(dy[c]) * double(w[c]);
    double xhat = (double(x[c]) - mu) * rs;
    dx[c] = T(rs * (g - mean_g - xhat * mean_gx));
  }
  if (pdw == nullptr) return;
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    pdw[c] += double(dy[c]) * ((double(x[c]) - mu) * rs);
    pdb[c] += double(dy[c]);
  }
}

// One RMSNorm row; returns rstd as stored.
template <typename T>
T rms_norm_row(const T* x, const T* w, double eps, int64_t n, T* y) {
  double sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t c = 0; c < n; ++c) sq += double(x[c]) * double(x[c]);
  const T rs = T(1.0 / std::sqrt(sq / double(n) + eps));
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) y[c] = x[c] * rs * w[c];
  return rs;
}

template <typename T>
void rms_norm_backward_row(const T* dy, const T* x, const T* w, double rs, int64_t n, T* dx,
                           double* pdw) {
  // dx = rstd * (g - xhat * mean(g * xhat)), g = dy * weight, xhat = x * rstd.
  double sum_gx = 0;
#pragma omp simd reduction(+ : sum_gx)
  for (int64_t c = 0; c < n; ++c) sum_gx += double(dy[c]) * double(w[c]) * (double(x[c]) * rs);
  const double mean_gx = sum_gx / double(n);
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    double xhat = double(x[c]) * rs;
    dx[c] = T(rs * (double(dy[c]) * double(w[c]) - xhat * mean_gx));
  }
  if (pdw == nullptr) return;
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) pdw[c] += double(dy[c]) * (double(x[c]) * rs);
}

template <typename T>
void layer_norm_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                     Tensor& y, Tensor& mean, Tensor& rstd, RowShape r) {
  const int64_t n = r.cols;
  std::vector<T> ones, zeros;
  const T* w = param_or<T>(weight, ones, n, T(1));
  const T* b = param_or<T>(bias, zeros, n, T(0));
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  T* mean_p = optional_data<T>(mean);
  T* rstd_p = optional_data<T>(rstd);
  parallel_for(0, r.rows, cpu::row_grain(n), [=](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      auto [mu, rs] = layer_norm_row(xp + row * n, w, b, eps, n, yp + row * n);
      if (mean_p) mean_p[row] = mu;
      if (rstd_p) rstd_p[row] = rs;
    }
  });
}

template <typename T>
void layer_norm_backward_impl(const Tensor& dy, const Tensor& x, const Tensor& weight,
                              const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight,
                              Tensor& dbias, RowShape r) {
  const int64_t n = r.cols;
  std::vector<T> ones;
  const T* w = param_or<T>(weight, ones, n, T(1));
  const T *xp = x.data<T>(), *dyp = dy.data<T>(), *mp = mean.data<T>(), *rp = rstd.data<T>();
  T* dxp = dx.data<T>();
  const bool params = dweight.defined() || dbias.defined();
  // Partial layout per block: [dweight (n) | dbias (n)].
  std::vector<double> total;
  blocked_rows(r, params ? 2 * n : 0, total, [=](int64_t lo, int64_t hi, double* part) {
    for (int64_t row = lo; row < hi; ++row)
      layer_norm_backward_row(dyp + row * n, xp + row * n, w, double(mp[row]), double(rp[row]), n,
                              dxp + row * n, params ? part : nullptr, params ? part + n : nullptr);
  });
  for (int64_t c = 0; params && c < n; ++c) {
    if (dweight.defined()) dweight.data<T>()[c] = T(total[size_t(c)]);
    if (dbias.defined()) dbias.data<T>()[c] = T(total[size_t(n + c)]);
  }
}

template <typename T>
void rms_norm_impl(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd,
                   RowShape r) {
  const int64_t n = r.cols;
  std::vector<T> ones;
  const T* w = param_or<T>(weight, ones, n, T(1));
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  T* rstd_p = optional_data<T>(rstd);
  parallel_for(0, r.rows, cpu::row_grain(n), [=](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      T rs = rms_norm_row(xp + row * n, w, eps, n, yp + row * n);
      if (rstd_p) rstd_p[row] = rs;
    }
  });
}

template <typename T>
void rms_norm_backward_impl(const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, Tensor& dx, Tensor& dweight, RowShape r) {
  const int64_t n = r.cols;
  std::vector<T> ones;
  const T* w = param_or<T>(weight, ones, n, T(1));
  const T *xp = x.data<T>(), *dyp = dy.data<T>(), *rp = rstd.data<T>();
  T* dxp = dx.data<T>();
  const bool params = dweight.defined();
  std::vector<double> total;
  blocked_rows(r, params ? n : 0, total, [=](int64_t lo, int64_t hi, double* pdw) {
    for (int64_t row = lo; row < hi; ++row)
      rms_norm_backward_row(dyp + row * n, xp + row * n, w, double(rp[row]), n, dxp + row * n,
                            params ? pdw : nullptr);
  });
  for (int64_t c = 0; params && c < n; ++c) dweight.data<T>()[c] = T(total[size_t(c)]);
}

}  // namespace

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                            Tensor& y, Tensor& mean, Tensor& rstd) {
  RowShape r = validate_layer_norm(*this, x, weight, bias, eps, y, mean, rstd);
  if (cpu::is_half(x.dtype()))
    return cpu::half_layer_norm(*this, x, weight, bias, eps, y, mean, rstd);
  cpu::dispatch_float(x.dtype(), [&](auto tag) {
    layer_norm_impl<decltype(tag)>(x, weight, bias, eps, y, mean, rstd, r);
  });
}

void CpuBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                     Tensor& dweight, Tensor& dbias) {
  RowShape r = validate_layer_norm_backward(*this, dy, x, weight, mean, rstd, dx, dweight, dbias);
  if (cpu::is_half(x.dtype()))
    return cpu::half_layer_norm_backward(*this, dy, x, weight, mean, rstd, dx, dweight, dbias);
  cpu::dispatch_float(x.dtype(), [&](auto tag) {
    layer_norm_backward_impl<decltype(tag)>(dy, x, weight, mean, rstd, dx, dweight, dbias, r);
  });
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y,
                          Tensor& rstd) {
  RowShape r = validate_rms_norm(*this, x, weight, eps, y, rstd);
  if (cpu::is_half(x.dtype())) return cpu::half_rms_norm(*this, x, weight, eps, y, rstd);
  cpu::dispatch_float(x.dtype(),
                      [&](auto tag) { rms_norm_impl<decltype(tag)>(x, weight, eps, y, rstd, r); });
}

void CpuBackend::rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  RowShape r = validate_rms_norm_backward(*this, dy, x, weight, rstd, dx, dweight);
  if (cpu::is_half(x.dtype()))
    return cpu::half_rms_norm_backward(*this, dy, x, weight, rstd, dx, dweight);
  cpu::dispatch_float(x.dtype(), [&](auto tag) {
    rms_norm_backward_impl<decltype(tag)>(dy, x, weight, rstd, dx, dweight, r);
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
