// SPDX-License-Identifier: Apache-2.0
#include "tessel/train/peak.h"

#include <algorithm>
#include <chrono>

#include "tessel/kernels/backend.h"
#include "tessel/tensor/tensor.h"

namespace tessel::train {

double measure_gemm_peak_gflops(double budget_s) {
  const int64_t n = 1024;
  Tensor a = randn({n, n}), b = randn({n, n}), c = zeros({n, n});
  kernels::Backend& backend = kernels::backend_for(a.device());
  const auto desc = kernels::dense_gemm_desc(1, n, n, n, false, false);
  backend.gemm(desc, a, b, c);  // warm-up: first-touch pages, the library's kernel selection
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 50; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    backend.gemm(desc, a, b, c);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * double(n) * double(n) * double(n) / s / 1e9);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            budget_s &&
        rep >= 4) {
      break;
    }
  }
  return best;
}

}  // namespace tessel::train
