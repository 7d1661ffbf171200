// SPDX-License-Identifier: Apache-2.0
// Reference AdamW step (Loshchilov & Hutter 2019, decoupled weight decay), as PyTorch's AdamW
// computes it: p *= 1 - lr*wd; m, v moving averages; bias-corrected update.
#include <cmath>

#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                             const AdamWParams& h) {
  validate_adamw(*this, param, grad, m, v, h);
  double* p = param.data<double>();
  const double* g = grad.data<double>();
  double* mp = m.data<double>();
  double* vp = v.data<double>();
  double bias1 = 1.0 - std::pow(h.beta1, double(h.step));
  double bias2 = 1.0 - std::pow(h.beta2, double(h.step));
  for (int64_t i = 0; i < param.numel(); ++i) {
    p[i] -= h.lr * h.weight_decay * p[i];
    mp[i] = h.beta1 * mp[i] + (1.0 - h.beta1) * g[i];
    vp[i] = h.beta2 * vp[i] + (1.0 - h.beta2) * g[i] * g[i];
    double m_hat = mp[i] / bias1, v_hat = vp[i] / bias2;
    p[i] -= h.lr * m_hat / (std::sqrt(v_hat) + h.eps);
  }
}

}  // namespace tessel::kernels
