// SPDX-License-Identifier: Apache-2.0
// The median rather than the best product: one lucky run must not set the peak MFU is read against.
#include "tessel/kernels/gemm_rate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "tessel/kernels/backend.h"
#include "tessel/tensor/tensor.h"

namespace tessel::kernels {

double gemm_gflops(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, double budget_s) {
  using Clock = std::chrono::steady_clock;
  Backend& backend = cpu_backend();
  const Tensor a = randn(trans_a ? Shape{k, m} : Shape{m, k});
  const Tensor b = randn(trans_b ? Shape{n, k} : Shape{k, n});
  Tensor c = zeros({m, n});
  const GemmDesc desc = dense_gemm_desc(1, m, n, k, trans_a, trans_b);
  backend.gemm(desc, a, b, c);  // warm-up: first-touch pages, the library's kernel selection
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 3 ||
         std::chrono::duration<double>(Clock::now() - start).count() < budget_s) {
    const auto t0 = Clock::now();
    backend.gemm(desc, a, b, c);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (times.size() >= 10000) break;
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return 2.0 * double(m) * double(n) * double(k) / times[times.size() / 2] / 1e9;
}

}  // namespace tessel::kernels
