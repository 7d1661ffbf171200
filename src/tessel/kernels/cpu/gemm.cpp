// SPDX-License-Identifier: Apache-2.0
// CPU GEMM: f32 through oneDNN's matmul, f64 through OpenBLAS dgemm, and f32 through OpenBLAS
// sgemm for the one shape class where oneDNN 2.6 collapses on this hardware; the decode step's
// few rows against a transposed weight through the register tiles of gemm_invariant.cpp or,
// from 8 (avx512) or 4 (avx2) rows, gemm_lanes.cpp; bf16 through oneDNN's bf16 matmul where
// the CPU has bf16 arithmetic (AVX-512-BF16, AMX), otherwise bf16 / f16 operands are widened to f32
// (half_kernels.cpp). While kernels::batch_invariant() is on, products against a transposed weight
// take gemm_invariant.cpp instead. docs/KERNELS.md has the measurements behind these choices.
#include <cblas.h>

#include <cstring>
#include <memory>

#include "tessel/core/cpu_features.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/batch_invariant.h"
#include "tessel/kernels/cpu/gemm_check.h"
#include "tessel/kernels/cpu/gemm_invariant.h"
#include "tessel/kernels/cpu/gemm_onednn.h"
#include "tessel/kernels/cpu/isa_region.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/gemm_lanes.h"
#include "tessel/kernels/cpu/gemv.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/half_kernels.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

// C = beta * C, the whole product when k == 0 (beta == 0 clears C, NaNs included, as in BLAS).
template <typename T>
void scale_c(const GemmDesc& d, T* c) {
  for (int64_t bt = 0; bt < d.batch; ++bt)
    for (int64_t i = 0; i < d.m; ++i) {
      T* row = c + bt * d.stride_c + i * d.ldc;
      for (int64_t j = 0; j < d.n; ++j) row[j] = d.beta == 0 ? T(0) : T(d.beta * row[j]);
    }
}

void blas_one(const GemmDesc& d, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, d.trans_a ? CblasTrans : CblasNoTrans,
              d.trans_b ? CblasTrans : CblasNoTrans, blasint(d.m), blasint(d.n), blasint(d.k),
              float(d.alpha), a, blasint(d.lda), b, blasint(d.ldb), float(d.beta), c,
              blasint(d.ldc));
}

void blas_one(const GemmDesc& d, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, d.trans_a ? CblasTrans : CblasNoTrans,
              d.trans_b ? CblasTrans : CblasNoTrans, blasint(d.m), blasint(d.n), blasint(d.k),
              d.alpha, a, blasint(d.lda), b, blasint(d.ldb), d.beta, c, blasint(d.ldc));
}

template <typename T>
void blas_gemm(const GemmDesc& d, const T* a, const T* b, T* c) {
  // BLAS takes 32-bit sizes: larger products would be silently truncated.
  constexpr int64_t kMax = INT32_MAX;
  TESSEL_CHECK(
      d.m <= kMax && d.n <= kMax && d.k <= kMax && d.lda <= kMax && d.ldb <= kMax && d.ldc <= kMax,
      "gemm: sizes and leading dimensions must fit in 32 bits for BLAS, got m ", d.m, " n ", d.n,
      " k ", d.k, " lda ", d.lda, " ldb ", d.ldb, " ldc ", d.ldc);
  auto one = [&](int64_t bt) {
    blas_one(d, a + bt * d.stride_a, b + bt * d.stride_b, c + bt * d.stride_c);
  };
  // Small products: one per thread (OpenBLAS runs single-threaded inside a parallel region).
  // Large ones: one after another, each using the whole pool.
  constexpr double kSmallFlops = 2.0 * 96 * 96 * 96;
  if (d.batch > 1 && 2.0 * d.m * d.n * d.k < kSmallFlops) {
    parallel_for(0, d.batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t bt = lo; bt < hi; ++bt) one(bt);
    });
  } else {
    for (int64_t bt = 0; bt < d.batch; ++bt) one(bt);
  }
}

// oneDNN 2.6's f32 kernels read a non-transposed B in place (unpacked); if B's row stride is a
// multiple of 4 KiB its rows fall into the same cache sets and throughput halves or worse (AVX2:
// 40-45 vs 85-95 GFLOP/s per core; AVX-512, 256 x 3072 x 768: 80 vs 153-162, and 512 rows 75).
// From kPadMinRows rows B is copied into rows 64 bytes longer and oneDNN runs on the copy (the
// copy reads and writes k x n floats once, against the product's 2 m k n FLOPs: 1.5-2x faster
// than in place on AVX-512 from 64 rows, and never slower with oneDNN's AVX2 kernels). Below that
// the copy costs more than the product: 8-63 rows go to OpenBLAS, which packs B itself, where
// oneDNN runs its AVX2 kernels (the collapse above was measured there), and stay on oneDNN in
// place where it has AVX-512 (2-2.7x faster than OpenBLAS at 8-32 rows). Fewer rows (decode) stay
// on oneDNN everywhere, 1.3-4.5x faster than OpenBLAS there. docs/KERNELS.md, "B strides that
// alias".
constexpr int64_t kFloatsPer4K = 1024;
constexpr int64_t kPadMinRows = 64;
bool b_aliases(const GemmDesc& d) {
  return !d.trans_b && d.ldb % kFloatsPer4K == 0 && d.m >= 8;
}

void onednn_padded_b(const GemmDesc& d, const float* a, const float* b, float* c) {
  constexpr int64_t kPad = 16;  // floats: one cache line
  const int64_t ldb = d.n + kPad, per = d.k * ldb;
  const int64_t copies = d.stride_b == 0 ? 1 : d.batch;
  std::unique_ptr<float[]> padded(new float[size_t(copies * per)]);
  float* out = padded.get();
  parallel_for(0, copies * d.k, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t bt = r / d.k, row = r % d.k;
      std::memcpy(out + bt * per + row * ldb, b + bt * d.stride_b + row * d.ldb,
                  size_t(d.n) * sizeof(float));
    }
  });
  GemmDesc p = d;
  p.ldb = ldb;
  p.stride_b = d.stride_b == 0 ? 0 : per;
  onednn::gemm(p, a, out, c);
}

// Products of a few rows against a transposed weight (decode steps of 1 to kTiledMaxRows
// streams, the LM head over the sampled rows) take the register-tiled kernel of
// gemm_invariant.cpp: on the avx2 and avx512 sets it beat both small_m_gemm and oneDNN there
// (docs/KERNELS.md, "Products of a serving step"); from about 64 rows oneDNN's packed kernels are
// ahead. From half a vector's lanes of rows up to three vectors' (8-48 rows on avx512, 4-24 on
// avx2) the rows-across-the-lanes kernel (gemm_lanes.cpp) is faster still, 1.2-1.4x at 16 rows,
// but its sums run in another order, so batch-invariant mode keeps the tiles. The baseline set
// keeps the older paths (its tiles have no FMA).
constexpr int64_t kTiledMaxRows = 48;
bool tiled_small_m(const GemmDesc& d) {
  return TESSEL_KERNEL_ISA_LEVEL >= 1 && cpu::invariant_gemm_fits(d) && d.m <= kTiledMaxRows;
}

}  // namespace

void CpuBackend::gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, Tensor& c) {
  check_gemm("gemm", d, a, b, c);
  DType dt = c.dtype();
  TESSEL_CHECK(dt == DType::F32 || dt == DType::F64 || cpu::is_half(dt),
               "gemm: the cpu backend has no ", dtype_name(dt), " gemm (f32, f64, bf16, f16)");
  if (d.batch == 0 || d.m == 0 || d.n == 0) return;
  if (dt != DType::F64 && batch_invariant() && cpu::invariant_gemm_fits(d))
    return cpu::invariant_gemm(d, a, b, c);
  if (dt == DType::BF16 && d.k > 0 && onednn::bf16_gemm_native(d.m))
    return onednn::gemm_bf16(d, static_cast<const uint16_t*>(a.data_ptr()),
                             static_cast<const uint16_t*>(b.data_ptr()),
                             static_cast<uint16_t*>(c.data_ptr()));
  if (cpu::is_half(dt)) return cpu::half_gemm(*this, d, a, b, c);
  if (dt == DType::F64) {
    if (d.k == 0) return scale_c(d, c.data<double>());
    return blas_gemm(d, a.data<double>(), b.data<double>(), c.data<double>());
  }
  if (d.k == 0) return scale_c(d, c.data<float>());
  if (cpu::lanes_gemm_fits(d))
    return cpu::lanes_gemm(d, a.data<float>(), b.data<float>(), c.data<float>());
  if (tiled_small_m(d)) return cpu::invariant_gemm(d, a, b, c);
  if (cpu::small_m_gemm_fits(d))
    return cpu::small_m_gemm(d, a.data<float>(), b.data<float>(), c.data<float>());
  if (b_aliases(d)) {
    if (d.m >= kPadMinRows)
      return onednn_padded_b(d, a.data<float>(), b.data<float>(), c.data<float>());
    if (!cpu_features().avx512f)
      return blas_gemm(d, a.data<float>(), b.data<float>(), c.data<float>());
  }
  onednn::gemm(d, a.data<float>(), b.data<float>(), c.data<float>());
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
