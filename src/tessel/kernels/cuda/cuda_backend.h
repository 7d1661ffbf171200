// SPDX-License-Identifier: Apache-2.0
// CudaBackend: the Backend of one CUDA device. Each op family is a thin adapter in its own file
// (cuda_backend_<family>.cpp) that checks its operands as the CPU backend does and queues a
// launcher (a cuBLASLt call, or a kernel of this folder or of ops/ and attention/) on tessel's
// stream of the device; nothing waits for the device except copies to the host and the ops whose
// indices only the device can check (embedding, cross-entropy, rope: they read the launcher's
// error flag) or that return to the host (square_sums) or whose indices are checked on the host
// (the paged calls copy slots and block tables there). supports() is
// true exactly for the ops implemented here; every other op throws an Error naming it and the
// device. Compiled only with TESSEL_CUDA.
#pragma once

#include <cublasLt.h>

#include "tessel/kernels/backend.h"

namespace tessel::kernels::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return name_; }
  bool supports(Op op, DType dtype) const override;
  int device_index() const { return device_; }
  // f32 GEMM on TF32 tensor cores (TESSEL_CUDA_TF32=1 when the backend was created).
  bool tf32() const { return tf32_; }
  // attention_backward on the plain kernels, identical bits on every run
  // (TESSEL_CUDA_DETERMINISTIC=1 when the backend was created); else the tensor-core kernels
  // where they apply, whose dq sums with atomics.
  bool deterministic_attention() const { return deterministic_attention_; }

  // cuda_backend_gemm.cpp
  void gemm(const GemmDesc& desc, const Tensor& a, const Tensor& b, Tensor& c) override;
  // cuda_backend_convert.cpp
  void convert(const Tensor& src, Tensor& dst) override;

  // cuda_backend_elementwise.cpp
  void unary(UnaryOp op, const Tensor& x, Tensor& y, double alpha) override;
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                      double alpha) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void dropout(const Tensor& x, Tensor& y, double p, uint64_t seed, uint64_t offset) override;
  // cuda_backend_reduce.cpp
  void reduce(ReduceOp op, const Tensor& x, std::span<const int> dims, Tensor& out) override;
  void square_sums(std::span<const Tensor> xs, std::span<double> out) override;
  // cuda_backend_softmax.cpp
  void softmax(const Tensor& x, Tensor& y, bool log) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     Tensor& losses, Tensor& lse) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& dlosses, int64_t ignore_index,
                              Tensor& dlogits) override;
  // cuda_backend_norm.cpp
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                  Tensor& mean, Tensor& rstd) override;
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight,
                           Tensor& dbias) override;
  void rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y,
                Tensor& rstd) override;
  void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& rstd, Tensor& dx, Tensor& dweight) override;
  // cuda_backend_embedding.cpp
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override;
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) override;
  void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
            bool inverse, Tensor& out) override;
  // cuda_backend_optimizer.cpp
  void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
             const AdamWParams& params) override;
  // cuda_backend_attention.cpp
  void attention(const AttentionDesc& desc, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& mask, Tensor& out, Tensor& lse) override;
  void attention_backward(const AttentionDesc& desc, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& mask, const Tensor& out, const Tensor& lse,
                          const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override;
  void paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_pool,
                      Tensor& v_pool) override;
  void paged_attention(const PagedAttentionDesc& desc, const Tensor& q, const Tensor& k_pool,
                       const Tensor& v_pool, const Tensor& block_tables, const Tensor& seq_lens,
                       const Tensor& query_starts, Tensor& out) override;

  // Not implemented on CUDA yet (supports() is false): each throws.
  void quant_matmul(quant::QuantType type, const Tensor& x, const Tensor& w, Tensor& y) override;
  void grouped_gemm(const GroupedGemmDesc& desc, const Tensor& a, const Tensor& b,
                    const Tensor& offsets, Tensor& c) override;

  // Error unless every defined tensor lies on this backend's device (`op` names the caller).
  void check_on_device(std::string_view op, std::initializer_list<const Tensor*> tensors) const;

 private:
  [[noreturn]] void unsupported(Op op) const;

  int device_ = 0;
  std::string name_;
  bool tf32_ = false;
  bool deterministic_attention_ = false;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace tessel::kernels::cuda
