// SPDX-License-Identifier: Apache-2.0
// CudaBackend's construction (cuBLASLt handle, workspace), its table of supported ops, the ops
// not implemented on CUDA yet, and one backend per device.
#include "tessel/kernels/cuda/cuda_backend.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

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
      tf32_(env_flag("TESSEL_CUDA_TF32")) {
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
  switch (op) {
    case Op::Gemm:
      return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::BF16 ||
             dtype == DType::F16;
    default:
      return false;
  }
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

void CudaBackend::unary(UnaryOp, const Tensor&, Tensor&, double) {
  unsupported(Op::Unary);
}
void CudaBackend::unary_backward(UnaryOp, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                 double) {
  unsupported(Op::UnaryBackward);
}
void CudaBackend::binary(BinaryOp, const Tensor&, const Tensor&, Tensor&) {
  unsupported(Op::Binary);
}
void CudaBackend::reduce(ReduceOp, const Tensor&, std::span<const int>, Tensor&) {
  unsupported(Op::Reduce);
}
void CudaBackend::softmax(const Tensor&, Tensor&, bool) {
  unsupported(Op::Softmax);
}
void CudaBackend::softmax_backward(const Tensor&, const Tensor&, Tensor&, bool) {
  unsupported(Op::SoftmaxBackward);
}
void CudaBackend::layer_norm(const Tensor&, const Tensor&, const Tensor&, double, Tensor&, Tensor&,
                             Tensor&) {
  unsupported(Op::LayerNorm);
}
void CudaBackend::layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, Tensor&, Tensor&, Tensor&) {
  unsupported(Op::LayerNormBackward);
}
void CudaBackend::rms_norm(const Tensor&, const Tensor&, double, Tensor&, Tensor&) {
  unsupported(Op::RmsNorm);
}
void CudaBackend::rms_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                    Tensor&, Tensor&) {
  unsupported(Op::RmsNormBackward);
}
void CudaBackend::embedding(const Tensor&, const Tensor&, Tensor&) {
  unsupported(Op::Embedding);
}
void CudaBackend::embedding_backward(const Tensor&, const Tensor&, Tensor&) {
  unsupported(Op::EmbeddingBackward);
}
void CudaBackend::attention(const AttentionDesc&, const Tensor&, const Tensor&, const Tensor&,
                            const Tensor&, Tensor&, Tensor&) {
  unsupported(Op::Attention);
}
void CudaBackend::attention_backward(const AttentionDesc&, const Tensor&, const Tensor&,
                                     const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, Tensor&, Tensor&, Tensor&) {
  unsupported(Op::AttentionBackward);
}
void CudaBackend::cross_entropy(const Tensor&, const Tensor&, int64_t, Tensor&, Tensor&) {
  unsupported(Op::CrossEntropy);
}
void CudaBackend::cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         int64_t, Tensor&) {
  unsupported(Op::CrossEntropyBackward);
}
void CudaBackend::adamw(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWParams&) {
  unsupported(Op::AdamW);
}
void CudaBackend::dropout(const Tensor&, Tensor&, double, uint64_t, uint64_t) {
  unsupported(Op::Dropout);
}
void CudaBackend::rope(const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, Tensor&) {
  unsupported(Op::Rope);
}
void CudaBackend::square_sums(std::span<const Tensor>, std::span<double>) {
  unsupported(Op::SquareSum);
}
void CudaBackend::quant_matmul(quant::QuantType, const Tensor&, const Tensor&, Tensor&) {
  unsupported(Op::QuantMatmul);
}
void CudaBackend::paged_kv_store(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  unsupported(Op::PagedKvStore);
}
void CudaBackend::paged_attention(const PagedAttentionDesc&, const Tensor&, const Tensor&,
                                  const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  Tensor&) {
  unsupported(Op::PagedAttention);
}
void CudaBackend::grouped_gemm(const GroupedGemmDesc&, const Tensor&, const Tensor&, const Tensor&,
                               Tensor&) {
  unsupported(Op::GroupedGemm);
}

}  // namespace cuda

Backend& cuda_backend(int device) {
  require_cuda_device(Device::cuda(device));
  static std::mutex mutex;
  // Never destroyed: kernels may still be queued when statics are torn down.
  static std::vector<cuda::CudaBackend*>* all = new std::vector<cuda::CudaBackend*>();
  std::lock_guard<std::mutex> lock(mutex);
  if (all->size() <= size_t(device)) all->resize(size_t(device) + 1, nullptr);
  cuda::CudaBackend*& b = (*all)[size_t(device)];
  if (b == nullptr) b = new cuda::CudaBackend(device);
  return *b;
}

}  // namespace tessel::kernels
