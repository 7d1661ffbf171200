// SPDX-License-Identifier: Apache-2.0
// Reference dropout: element i is kept when uniform_at(seed, offset, i) >= p and scaled by
// 1 / (1 - p); p = 1 drops everything.
#include "tessel/core/rng.h"
#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::dropout(const Tensor& x, Tensor& y, double p, uint64_t seed,
                               uint64_t offset) {
  validate_dropout(*this, x, y, p);
  const double* xp = x.data<double>();
  double* yp = y.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    bool keep = double(uniform_at(seed, offset, uint64_t(i))) >= p;
    yp[i] = (keep && p < 1.0) ? xp[i] / (1.0 - p) : 0.0;
  }
}

}  // namespace tessel::kernels
