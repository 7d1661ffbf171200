// SPDX-License-Identifier: Apache-2.0
// Reference rotary position embedding: the rotate_half formula of backend.h in double, one
// element pair at a time, reading x whole before writing (so out may alias x).
#include <vector>

#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin,
                            const Tensor& positions, bool inverse, Tensor& out) {
  RopeShape r = validate_rope(*this, x, cos, sin, positions, out);
  const int64_t half = r.dim / 2;
  const double* xp = x.data<double>();
  const double* cp = cos.data<double>();
  const double* sp = sin.data<double>();
  double* op = out.data<double>();
  IndexView pos(positions);
  std::vector<double> row(size_t(r.dim));
  for (int64_t n = 0; n < r.tokens; ++n) {
    const double* c = cp + pos[n] * half;
    const double* s = sp + pos[n] * half;
    for (int64_t h = 0; h < r.heads; ++h) {
      const int64_t at = (n * r.heads + h) * r.dim;
      for (int64_t i = 0; i < r.dim; ++i) row[size_t(i)] = xp[at + i];
      for (int64_t i = 0; i < half; ++i) {
        double x1 = row[size_t(i)], x2 = row[size_t(half + i)];
        double sn = inverse ? -s[i] : s[i];
        op[at + i] = x1 * c[i] - x2 * sn;
        op[at + half + i] = x2 * c[i] + x1 * sn;
      }
    }
  }
}

}  // namespace tessel::kernels
