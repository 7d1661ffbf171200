// SPDX-License-Identifier: Apache-2.0
// CPU AdamW step (Loshchilov & Hutter 2019): decoupled weight decay, then the bias-corrected
// Adam update, in PyTorch's arrangement p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps). One
// streaming pass over param, grad, m and v, vectorised and split over the pool.
#include <cmath>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/loops.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

void CpuBackend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                       const AdamWParams& h) {
  validate_adamw(*this, param, grad, m, v, h);
  cpu::dispatch_float(param.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* mp = m.data<T>();  // the moments' stat dtype equals T for f32 and f64 params
    T* vp = v.data<T>();
    const double bias1 = 1.0 - std::pow(h.beta1, double(h.step));
    const double bias2 = 1.0 - std::pow(h.beta2, double(h.step));
    const T decay = T(1.0 - h.lr * h.weight_decay);
    const T b1 = T(h.beta1), one_minus_b1 = T(1.0 - h.beta1);
    const T b2 = T(h.beta2), one_minus_b2 = T(1.0 - h.beta2);
    const T step_size = T(h.lr / bias1), inv_sqrt_bias2 = T(1.0 / std::sqrt(bias2));
    const T eps = T(h.eps);
    parallel_for(0, param.numel(), cpu::kElementGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        T gi = g[i];
        T mi = b1 * mp[i] + one_minus_b1 * gi;
        T vi = b2 * vp[i] + one_minus_b2 * gi * gi;
        mp[i] = mi;
        vp[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bias2 + eps);
      }
    });
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
