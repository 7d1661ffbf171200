// SPDX-License-Identifier: Apache-2.0
// Small-m GEMM against a transposed weight (the decode step's shape), memory-bound: four rows of B
// per pass, each with its own vector accumulator per row of A, so the FMA chains are independent
// and several streams of B are in flight. docs/KERNELS.md has the measurements.
#include "tessel/kernels/cpu/gemv.h"

#include <algorithm>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
TESSEL_ISA_BEGIN

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

namespace {

// Rows of B per pass: enough independent accumulators to hide the FMA latency.
constexpr int64_t kRowsPerPass = 4;
// Rows of B per task: a task streams at least ~64 KiB for k = 768.
constexpr int64_t kRowGrain = 32;

// dot(x, y) over k elements.
inline float dot(const float* x, const float* y, int64_t k) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < k; ++i) s += x[i] * y[i];
  return s;
}

// dot products of one row of A with four rows of B.
inline void dot4(const float* x, const float* b0, const float* b1, const float* b2, const float* b3,
                 int64_t k, float out[4]) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t i = 0; i < k; ++i) {
    const float xi = x[i];
    s0 += xi * b0[i];
    s1 += xi * b1[i];
    s2 += xi * b2[i];
    s3 += xi * b3[i];
  }
  out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
}

void store(const GemmDesc& d, float* c, float value) {
  const float alpha = float(d.alpha), beta = float(d.beta);
  *c = d.beta == 0 ? alpha * value : alpha * value + beta * *c;
}

}  // namespace

bool small_m_gemm_fits(const GemmDesc& d) {
  return !d.trans_a && d.trans_b && d.m >= 1 && d.m <= kGemvMaxRows && d.k >= 1;
}

void small_m_gemm(const GemmDesc& d, const float* a, const float* b, float* c) {
  for (int64_t bt = 0; bt < d.batch; ++bt) {
    const float* ab = a + bt * d.stride_a;
    const float* bb = b + bt * d.stride_b;
    float* cb = c + bt * d.stride_c;
    parallel_for(0, d.n, kRowGrain, [&](int64_t lo, int64_t hi) {
      int64_t j = lo;
      for (; j + kRowsPerPass <= hi; j += kRowsPerPass) {
        const float* r = bb + j * d.ldb;
        for (int64_t i = 0; i < d.m; ++i) {
          float s[4];
          dot4(ab + i * d.lda, r, r + d.ldb, r + 2 * d.ldb, r + 3 * d.ldb, d.k, s);
          for (int q = 0; q < 4; ++q) store(d, cb + i * d.ldc + j + q, s[q]);
        }
      }
      for (; j < hi; ++j)
        for (int64_t i = 0; i < d.m; ++i)
          store(d, cb + i * d.ldc + j, dot(ab + i * d.lda, bb + j * d.ldb, d.k));
    });
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
TESSEL_ISA_END
