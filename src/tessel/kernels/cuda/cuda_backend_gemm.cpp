// SPDX-License-Identifier: Apache-2.0
// CudaBackend::gemm through cuBLASLt, with GemmDesc's exact semantics (backend.h; checked by the
// CPU backend's check_gemm). cuBLASLt is column-major and tessel row-major: a row-major m x n C
// is a column-major n x m matrix, so C^T = op(B)^T op(A)^T is computed with B's storage as
// cuBLASLt's A and A's as its B, the transposes carried over unchanged.
// Precision: f64 in f64; f32 in f32 (on TF32 tensor cores when TESSEL_CUDA_TF32=1); bf16 and f16
// with f32 accumulation and f32 alpha/beta.
#include <algorithm>

#include "tessel/kernels/cpu/gemm_check.h"
#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/kernels/cuda/elementwise_launch.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels::cuda {

namespace {

struct LtTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

LtTypes lt_types(DType dtype, bool tf32) {
  switch (dtype) {
    case DType::F64:
      return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    case DType::F32:
      return {CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::BF16:
      return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::F16:
      return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    default:
      TESSEL_FAIL("gemm on CUDA: dtype ", dtype_name(dtype), " is not supported");
  }
}

// Owners of the cuBLASLt descriptors of one call.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d != nullptr) cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() {
    if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
  }
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p != nullptr) cublasLtMatmulPreferenceDestroy(p);
  }
};

// A column-major rows x cols layout with leading dimension ld, `batch` of them `stride` apart.
void make_layout(Layout& out, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                 int64_t batch, int64_t stride) {
  TESSEL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&out.l, type, uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    int32_t count = int32_t(batch);
    TESSEL_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(out.l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                         &count, sizeof count));
    TESSEL_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        out.l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
}

// The alignment cuBLASLt may assume for an operand: that of its address and, with a batch, of
// the batch stride (capped at 256, the most cuBLASLt asks about).
uint32_t alignment(const void* p, int64_t batch, int64_t stride, size_t element) {
  uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(p)) | 256;
  if (batch > 1 && stride != 0) bits |= uint64_t(stride) * element;
  return uint32_t(bits & (~bits + 1));  // lowest set bit
}

}  // namespace

void CudaBackend::gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, Tensor& c) {
  check_gemm("gemm", d, a, b, c);
  check_on_device("gemm", {&a, &b, &c});
  TESSEL_CHECK(supports(Op::Gemm, c.dtype()), "gemm on ", name_, ": dtype ", dtype_name(c.dtype()),
               " is not supported");
  TESSEL_CHECK(d.batch <= INT32_MAX, "gemm on ", name_, ": batch ", d.batch, " exceeds 2^31 - 1");
  if (d.batch == 0 || d.m == 0 || d.n == 0) return;
  DeviceGuard guard(device_);
  cudaStream_t s = stream(device_);
  void* pa = device_data(a);
  void* pb = device_data(b);
  void* pc = device_data(c);
  if (d.k == 0) {  // C = beta * C: cuBLASLt takes no empty inner dimension
    TESSEL_CUDA_CHECK(
        launch_scale_matrices(pc, c.dtype(), d.batch, d.m, d.n, d.ldc, d.stride_c, d.beta, s));
    return;
  }
  const LtTypes t = lt_types(c.dtype(), tf32_);
  MatmulDesc op;
  TESSEL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op.d, t.compute, t.scale));
  const cublasOperation_t op_a = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A = our B
  const cublasOperation_t op_b = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B = our A
  TESSEL_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  TESSEL_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  // Stored (row-major) B is trans_b ? n x k : k x n, which column-major reads as its transpose.
  Layout la, lb, lc;
  make_layout(la, t.data, d.trans_b ? d.k : d.n, d.trans_b ? d.n : d.k, d.ldb, d.batch, d.stride_b);
  make_layout(lb, t.data, d.trans_a ? d.m : d.k, d.trans_a ? d.k : d.m, d.lda, d.batch, d.stride_a);
  make_layout(lc, t.data, d.n, d.m, d.ldc, d.batch, d.stride_c);

  Preference pref;
  TESSEL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
  TESSEL_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes_, sizeof workspace_bytes_));
  const size_t es = c.element_size();
  const uint32_t align_a = alignment(pb, d.batch, d.stride_b, es);
  const uint32_t align_b = alignment(pa, d.batch, d.stride_a, es);
  const uint32_t align_c = alignment(pc, d.batch, d.stride_c, es);
  TESSEL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
  TESSEL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
  TESSEL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c));
  TESSEL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c));

  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  TESSEL_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_, op.d, la.l, lb.l, lc.l, lc.l, pref.p, 1,
                                                     &heuristic, &found));
  TESSEL_CHECK(found > 0, "gemm on ", name_, ": cuBLASLt has no algorithm for ",
               dtype_name(c.dtype()), " batch ", d.batch, " m ", d.m, " n ", d.n, " k ", d.k,
               " (trans_a ", d.trans_a, ", trans_b ", d.trans_b, ", ld ", d.lda, "/", d.ldb, "/",
               d.ldc, ")");

  const float alpha_f = float(d.alpha), beta_f = float(d.beta);
  const double alpha_d = d.alpha, beta_d = d.beta;
  const bool f64 = t.scale == CUDA_R_64F;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  TESSEL_CUBLAS_CHECK(cublasLtMatmul(lt_, op.d, alpha, pb, la.l, pa, lb.l, beta, pc, lc.l, pc, lc.l,
                                     &heuristic.algo, workspace_, workspace_bytes_, s));
}

}  // namespace tessel::kernels::cuda
