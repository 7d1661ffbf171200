// SPDX-License-Identifier: Apache-2.0
// The fp64 reference backend: plain loops in double precision, written for obviousness, not speed.
// It accepts f64 tensors (and integer index tensors) only: the op harness converts inputs to f64,
// runs this backend as the oracle and compares every other backend against it. Tests only.
#pragma once

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
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
  void paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_pool,
                      Tensor& v_pool) override;
  void paged_attention(const PagedAttentionDesc& desc, const Tensor& q, const Tensor& k_pool,
                       const Tensor& v_pool, const Tensor& block_tables, const Tensor& seq_lens,
                       const Tensor& query_starts, Tensor& out) override;
  void grouped_gemm(const GroupedGemmDesc& desc, const Tensor& a, const Tensor& b,
                    const Tensor& offsets, Tensor& c) override;
};

Backend& reference_backend();

}  // namespace tessel::kernels
