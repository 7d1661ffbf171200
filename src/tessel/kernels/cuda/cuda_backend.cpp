// SPDX-License-Identifier: Apache-2.0
// CudaBackend's construction (cuBLASLt handle, workspace), its table of supported ops, the ops
// not implemented on CUDA yet (quant_matmul, grouped_gemm), and one backend per device.
#include "tessel/kernels/cuda/cuda_backend.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "tessel/core/profile.h"
#include "tessel/kernels/cpu/profiled_backend.h"
#include "tessel/kernels/cuda/cuda_backend_instance.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels {

namespace cuda {

namespace {
// cuBLASLt's recommended workspace on Hopper (its documentation: 32 MiB).
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr &&
         (std::strcmp(v, "1") == 0 || std::strcmp(v, "on") == 0 || std::strcmp(v, "true") == 0);
}
}  // namespace

CudaBackend::CudaBackend(int device)
    : device_(device),
      name_("cuda:" + std::to_string(device)),
      tf32_(env_flag("TESSEL_CUDA_TF32")),
      deterministic_attention_(env_flag("TESSEL_CUDA_DETERMINISTIC")) {
  require_cuda_device(Device::cuda(device));
  DeviceGuard guard(device_);
  TESSEL_CUBLAS_CHECK(cublasLtCreate(&lt_));
  TESSEL_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

CudaBackend::~CudaBackend() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
}

bool CudaBackend::supports(Op op, DType dtype) const {
  return cuda_supports(op, dtype);
}

void CudaBackend::check_on_device(std::string_view op,
                                  std::initializer_list<const Tensor*> tensors) const {
  int i = 0;
  for (const Tensor* t : tensors) {
    if (t->defined())
      TESSEL_CHECK(t->device() == Device::cuda(device_), op, " on ", name_, ": operand ", i,
                   " of shape ", t->shape(), " is on ", t->device().str());
    ++i;
  }
}

void CudaBackend::unsupported(Op op) const {
  TESSEL_FAIL(op_name(op), " is not implemented on CUDA yet (backend ", name_,
              "; supports() is false for it)");
}

void CudaBackend::quant_matmul(quant::QuantType, const Tensor&, const Tensor&, Tensor&) {
  unsupported(Op::QuantMatmul);
}
void CudaBackend::grouped_gemm(const GroupedGemmDesc&, const Tensor&, const Tensor&, const Tensor&,
                               Tensor&) {
  unsupported(Op::GroupedGemm);
}

}  // namespace cuda

bool cuda_supports(Op op, DType dtype) {
  const bool f32_or_half = dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16;
  switch (op) {
    case Op::Gemm:
      return f32_or_half || dtype == DType::F64;
    // The launchers of ops/ and attention/ compute in f32 and store f32, bf16 or f16.
    case Op::Unary:
    case Op::UnaryBackward:
    case Op::Binary:
    case Op::Reduce:
    case Op::Softmax:
    case Op::SoftmaxBackward:
    case Op::LayerNorm:
    case Op::LayerNormBackward:
    case Op::RmsNorm:
    case Op::RmsNormBackward:
    case Op::Embedding:
    case Op::EmbeddingBackward:
    case Op::Attention:
    case Op::AttentionBackward:
    case Op::CrossEntropy:
    case Op::CrossEntropyBackward:
    case Op::Dropout:
    case Op::Rope:
    case Op::SquareSum:
    case Op::PagedKvStore:
    case Op::PagedAttention:
      return f32_or_half;
    case Op::AdamW:  // f32 master weights, as on the CPU
      return dtype == DType::F32;
    case Op::QuantMatmul:  // no CUDA kernel yet
    case Op::GroupedGemm:
      return false;
  }
  return false;
}

namespace {

// TESSEL_CUDA_PROFILE=1: every call of the CUDA backend timed to the end of its kernels
// (kernels/cpu/profiled_backend.h with a device wait inside each call, so the run is slower than
// an unprofiled one) and the table of calls printed to stderr at exit: a GPU run's per-op
// breakdown where no profiler runs.
bool cuda_profiling() {
  static const bool on = [] {
    const char* v = std::getenv("TESSEL_CUDA_PROFILE");
    if (v == nullptr || std::strcmp(v, "1") != 0) return false;
    profile::report_at_exit("TESSEL_CUDA_PROFILE");
    return true;
  }();
  return on;
}

}  // namespace

Backend& cuda_backend(int device) {
  require_cuda_device(Device::cuda(device));
  static std::mutex mutex;
  // Never destroyed: kernels may still be queued when statics are torn down.
  static std::vector<cuda::CudaBackend*>* all = new std::vector<cuda::CudaBackend*>();
  std::lock_guard<std::mutex> lock(mutex);
  if (all->size() <= size_t(device)) all->resize(size_t(device) + 1, nullptr);
  cuda::CudaBackend*& b = (*all)[size_t(device)];
  if (b == nullptr) b = new cuda::CudaBackend(device);
  if (cuda_profiling()) [[unlikely]]
    return profiled(*b, [device] { synchronize_device(Device::cuda(device)); });
  return *b;
}

}  // namespace tessel::kernels
