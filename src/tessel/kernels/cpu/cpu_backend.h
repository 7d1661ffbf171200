// SPDX-License-Identifier: Apache-2.0
// The CPU backend: GEMM through oneDNN (fp64 through OpenBLAS), everything else hand-written,
// vectorised by the compiler for one kernel set's instructions (kernel_set.h: this class exists
// once per set, in the set's namespace; include it inside TESSEL_ISA_BEGIN, isa_region.h) and
// parallel over tessel's one OpenMP pool. bf16 and f16 tensors are stored in 16 bits and computed
// in f32 (half_kernels.h). Each kernel family lives in its own file in this folder.
#pragma once

#include "tessel/kernels/backend.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  bool supports(Op op, DType dtype) const override;

  void gemm(const GemmDesc& desc, const Tensor& a, const Tensor& b, Tensor& c) override;
  void unary(UnaryOp op, const Tensor& x, Tensor& y, double alpha) override;
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                      double alpha) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& x, std::span<const int> dims, Tensor& out) override;
  void softmax(const Tensor& x, Tensor& y, bool log) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                  Tensor& mean, Tensor& rstd) override;
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight,
                           Tensor& dbias) override;
  void rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y,
                Tensor& rstd) override;
  void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& rstd, Tensor& dx, Tensor& dweight) override;
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override;
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) override;
  void attention(const AttentionDesc& desc, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& mask, Tensor& out, Tensor& lse) override;
  void attention_backward(const AttentionDesc& desc, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& mask, const Tensor& out, const Tensor& lse,
                          const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     Tensor& losses, Tensor& lse) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& dlosses, int64_t ignore_index,
                              Tensor& dlogits) override;
  void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
             const AdamWParams& params) override;
  void dropout(const Tensor& x, Tensor& y, double p, uint64_t seed, uint64_t offset) override;
  void square_sums(std::span<const Tensor> xs, std::span<double> out) override;
  void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
            bool inverse, Tensor& out) override;
  void quant_matmul(quant::QuantType type, const Tensor& x, const Tensor& w, Tensor& y) override;
  quant::QuantType quant_layout(quant::QuantType type) const override;
  void paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_pool,
                      Tensor& v_pool) override;
  void paged_attention(const PagedAttentionDesc& desc, const Tensor& q, const Tensor& k_pool,
                       const Tensor& v_pool, const Tensor& block_tables, const Tensor& seq_lens,
                       const Tensor& query_starts, Tensor& out) override;
  void grouped_gemm(const GroupedGemmDesc& desc, const Tensor& a, const Tensor& b,
                    const Tensor& offsets, Tensor& c) override;
  void convert(const Tensor& src, Tensor& dst) override;
};

Backend& cpu_backend_instance();

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
