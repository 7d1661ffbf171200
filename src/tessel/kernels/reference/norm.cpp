// SPDX-License-Identifier: Apache-2.0
// Reference LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019) over the last dim,
// forward and backward, in double. Backward uses the saved mean / rstd, as the CPU kernel does.
#include <cmath>
#include <vector>

#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

namespace {
// Element c of an optional per-column tensor, or `fallback` when it is undefined.
double param_at(const Tensor& t, int64_t c, double fallback) {
  return t.defined() ? t.data<double>()[c] : fallback;
}
}  // namespace

void ReferenceBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  RowShape r = validate_layer_norm(*this, x, weight, bias, eps, y, mean, rstd);
  for (int64_t row = 0; row < r.rows; ++row) {
    const double* xr = x.data<double>() + row * r.cols;
    double* yr = y.data<double>() + row * r.cols;
    double mu = 0;
    for (int64_t c = 0; c < r.cols; ++c) mu += xr[c];
    mu /= double(r.cols);
    double var = 0;
    for (int64_t c = 0; c < r.cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    var /= double(r.cols);
    double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < r.cols; ++c)
      yr[c] = (xr[c] - mu) * rs * param_at(weight, c, 1.0) + param_at(bias, c, 0.0);
    if (mean.defined()) mean.data<double>()[row] = mu;
    if (rstd.defined()) rstd.data<double>()[row] = rs;
  }
}

void ReferenceBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                           const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                           Tensor& dweight, Tensor& dbias) {
  RowShape r = validate_layer_norm_backward(*this, dy, x, weight, mean, rstd, dx, dweight, dbias);
  std::vector<double> dw(size_t(r.cols), 0.0), db(size_t(r.cols), 0.0);
  for (int64_t row = 0; row < r.rows; ++row) {
    const double* xr = x.data<double>() + row * r.cols;
    const double* dyr = dy.data<double>() + row * r.cols;
    double* dxr = dx.data<double>() + row * r.cols;
    double mu = mean.data<double>()[row], rs = rstd.data<double>()[row];
    // With xhat = (x - mu) * rstd and g = dy * weight:
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    double mean_g = 0, mean_gx = 0;
    for (int64_t c = 0; c < r.cols; ++c) {
      double xhat = (xr[c] - mu) * rs, g = dyr[c] * param_at(weight, c, 1.0);
      mean_g += g;
      mean_gx += g * xhat;
      dw[size_t(c)] += dyr[c] * xhat;
      db[size_t(c)] += dyr[c];
    }
    mean_g /= double(r.cols);
    mean_gx /= double(r.cols);
    for (int64_t c = 0; c < r.cols; ++c) {
      double xhat = (xr[c] - mu) * rs, g = dyr[c] * param_at(weight, c, 1.0);
      dxr[c] = rs * (g - mean_g - xhat * mean_gx);
    }
  }
  for (int64_t c = 0; c < r.cols; ++c) {
    if (dweight.defined()) dweight.data<double>()[c] = dw[size_t(c)];
    if (dbias.defined()) dbias.data<double>()[c] = db[size_t(c)];
  }
}

void ReferenceBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y,
                                Tensor& rstd) {
  RowShape r = validate_rms_norm(*this, x, weight, eps, y, rstd);
  for (int64_t row = 0; row < r.rows; ++row) {
    const double* xr = x.data<double>() + row * r.cols;
    double* yr = y.data<double>() + row * r.cols;
    double ms = 0;
    for (int64_t c = 0; c < r.cols; ++c) ms += xr[c] * xr[c];
    ms /= double(r.cols);
    double rs = 1.0 / std::sqrt(ms + eps);
    for (int64_t c = 0; c < r.cols; ++c) yr[c] = xr[c] * rs * param_at(weight, c, 1.0);
    if (rstd.defined()) rstd.data<double>()[row] = rs;
  }
}

void ReferenceBackend::rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                         const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  RowShape r = validate_rms_norm_backward(*this, dy, x, weight, rstd, dx, dweight);
  std::vector<double> dw(size_t(r.cols), 0.0);
  for (int64_t row = 0; row < r.rows; ++row) {
    const double* xr = x.data<double>() + row * r.cols;
    const double* dyr = dy.data<double>() + row * r.cols;
    double* dxr = dx.data<double>() + row * r.cols;
    double rs = rstd.data<double>()[row];
    // With xhat = x * rstd and g = dy * weight: dx = rstd * (g - xhat * mean(g * xhat)).
    double mean_gx = 0;
    for (int64_t c = 0; c < r.cols; ++c) {
      double xhat = xr[c] * rs, g = dyr[c] * param_at(weight, c, 1.0);
      mean_gx += g * xhat;
      dw[size_t(c)] += dyr[c] * xhat;
    }
    mean_gx /= double(r.cols);
    for (int64_t c = 0; c < r.cols; ++c) {
      double xhat = xr[c] * rs, g = dyr[c] * param_at(weight, c, 1.0);
      dxr[c] = rs * (g - xhat * mean_gx);
    }
  }
  if (dweight.defined())
    for (int64_t c = 0; c < r.cols; ++c) dweight.data<double>()[c] = dw[size_t(c)];
}

}  // namespace tessel::kernels
