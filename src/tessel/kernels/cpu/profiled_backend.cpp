// SPDX-License-Identifier: Apache-2.0
// The profiling decorator of profiled_backend.h. Each entry point becomes one profile::Scope;
// GEMMs are keyed by transposes and m x n x k (with their FLOPs), so the forward, input-gradient
// and weight-gradient products of each layer shape are told apart.
#include "tessel/kernels/cpu/profiled_backend.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tessel/core/profile.h"

namespace tessel::kernels {

namespace {

class ProfiledBackend final : public Backend {
 public:
  ProfiledBackend(Backend& inner, std::function<void()> settle)
      : inner_(inner), settle_(std::move(settle)) {}

  std::string_view name() const override { return inner_.name(); }
  bool supports(Op op, DType dtype) const override { return inner_.supports(op, dtype); }

  void gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, Tensor& c) override {
    std::string label = "gemm." + std::string(d.trans_a ? "T" : "N") + (d.trans_b ? "T" : "N") +
                        " " + (d.batch > 1 ? std::to_string(d.batch) + "x(" : "") +
                        std::to_string(d.m) + "x" + std::to_string(d.n) + "x" +
                        std::to_string(d.k) + (d.batch > 1 ? ")" : "");
    profile::Scope s(label, 2.0 * double(d.batch) * double(d.m) * double(d.n) * double(d.k));
    inner_.gemm(d, a, b, c);
    settle();
  }
  void convert(const Tensor& src, Tensor& dst) override {
    std::string label = "convert." + std::string(dtype_name(src.dtype())) + "->" +
                        std::string(dtype_name(dst.dtype()));
    profile::Scope s(label);
    inner_.convert(src, dst);
    settle();
  }
  void unary(UnaryOp op, const Tensor& x, Tensor& y, double alpha) override {
    std::string label = "unary." + std::string(unary_name(op));
    profile::Scope s(label);
    inner_.unary(op, x, y, alpha);
    settle();
  }
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                      double alpha) override {
    std::string label = "unary_backward." + std::string(unary_name(op));
    profile::Scope s(label);
    inner_.unary_backward(op, x, y, dy, dx, alpha);
    settle();
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override {
    std::string label =
        "binary." + std::string(binary_name(op)) + " " + a.shape().str() + " " + b.shape().str();
    profile::Scope s(label);
    inner_.binary(op, a, b, out);
    settle();
  }
  void reduce(ReduceOp op, const Tensor& x, std::span<const int> dims, Tensor& out) override {
    std::string label = "reduce." + std::string(reduce_name(op)) + " " + x.shape().str();
    profile::Scope s(label);
    inner_.reduce(op, x, dims, out);
    settle();
  }
  void softmax(const Tensor& x, Tensor& y, bool log) override {
    profile::Scope s(log ? "log_softmax" : "softmax");
    inner_.softmax(x, y, log);
    settle();
  }
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override {
    profile::Scope s(log ? "log_softmax_backward" : "softmax_backward");
    inner_.softmax_backward(y, dy, dx, log);
    settle();
  }
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                  Tensor& mean, Tensor& rstd) override {
    profile::Scope s("layer_norm");
    inner_.layer_norm(x, weight, bias, eps, y, mean, rstd);
    settle();
  }
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight,
                           Tensor& dbias) override {
    profile::Scope s("layer_norm_backward");
    inner_.layer_norm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias);
    settle();
  }
  void rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y,
                Tensor& rstd) override {
    profile::Scope s("rms_norm");
    inner_.rms_norm(x, weight, eps, y, rstd);
    settle();
  }
  void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& rstd, Tensor& dx, Tensor& dweight) override {
    profile::Scope s("rms_norm_backward");
    inner_.rms_norm_backward(dy, x, weight, rstd, dx, dweight);
    settle();
  }
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override {
    profile::Scope s("embedding");
    inner_.embedding(weight, ids, out);
    settle();
  }
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) override {
    profile::Scope s("embedding_backward");
    inner_.embedding_backward(dout, ids, dweight);
    settle();
  }
  void attention(const AttentionDesc& d, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& mask, Tensor& out, Tensor& lse) override {
    profile::Scope s("attention", attention_flops(d));
    inner_.attention(d, q, k, v, mask, out, lse);
    settle();
  }
  void attention_backward(const AttentionDesc& d, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& mask, const Tensor& out, const Tensor& lse,
                          const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override {
    // Backward recomputes the scores and does four products to forward's two.
    profile::Scope s("attention_backward", 2.5 * attention_flops(d));
    inner_.attention_backward(d, q, k, v, mask, out, lse, dout, dq, dk, dv);
    settle();
  }
  void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     Tensor& losses, Tensor& lse) override {
    profile::Scope s("cross_entropy");
    inner_.cross_entropy(logits, targets, ignore_index, losses, lse);
    settle();
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& dlosses, int64_t ignore_index,
                              Tensor& dlogits) override {
    profile::Scope s("cross_entropy_backward");
    inner_.cross_entropy_backward(logits, targets, lse, dlosses, ignore_index, dlogits);
    settle();
  }
  void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
             const AdamWParams& params) override {
    profile::Scope s("adamw");
    inner_.adamw(param, grad, m, v, params);
    settle();
  }
  void dropout(const Tensor& x, Tensor& y, double p, uint64_t seed, uint64_t offset) override {
    profile::Scope s("dropout");
    inner_.dropout(x, y, p, seed, offset);
    settle();
  }
  void square_sums(std::span<const Tensor> xs, std::span<double> out) override {
    profile::Scope s("square_sum");
    inner_.square_sums(xs, out);
    settle();
  }
  void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
            bool inverse, Tensor& out) override {
    profile::Scope s(inverse ? "rope_backward" : "rope");
    inner_.rope(x, cos, sin, positions, inverse, out);
    settle();
  }
  void quant_matmul(quant::QuantType type, const Tensor& x, const Tensor& w, Tensor& y) override {
    profile::Scope s("quant_matmul");
    inner_.quant_matmul(type, x, w, y);
    settle();
  }
  quant::QuantType quant_layout(quant::QuantType type) const override {
    return inner_.quant_layout(type);
  }
  void paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_pool,
                      Tensor& v_pool) override {
    profile::Scope s("paged_kv_store");
    inner_.paged_kv_store(k, v, slots, k_pool, v_pool);
    settle();
  }
  void paged_attention(const PagedAttentionDesc& desc, const Tensor& q, const Tensor& k_pool,
                       const Tensor& v_pool, const Tensor& block_tables, const Tensor& seq_lens,
                       const Tensor& query_starts, Tensor& out) override {
    profile::Scope s("paged_attention");
    inner_.paged_attention(desc, q, k_pool, v_pool, block_tables, seq_lens, query_starts, out);
    settle();
  }
  void grouped_gemm(const GroupedGemmDesc& desc, const Tensor& a, const Tensor& b,
                    const Tensor& offsets, Tensor& c) override {
    // Each row of a meets one [K, N] matrix (rows form) or one [P, Q] outer product (weight form).
    const double flops =
        2.0 * double(a.numel()) * double(desc.weight_grad ? b.size(-1) : c.size(-1));
    // A literal: Scope keeps the name as a view, so a temporary string would dangle.
    profile::Scope s(desc.weight_grad ? "grouped_gemm.weight" : "grouped_gemm.rows", flops);
    inner_.grouped_gemm(desc, a, b, offsets, c);
    settle();
  }

 private:
  // Two products of head_dim per visible (query, key) pair and head: all q_len x kv_len pairs,
  // or with a causal mask (and sliding window) the keys each query position sees.
  static double attention_flops(const AttentionDesc& d) {
    double pairs = double(d.q_len) * double(d.kv_len);
    if (d.causal) {
      pairs = 0;
      for (int64_t i = 0; i < d.q_len; ++i) {
        int64_t p = i + d.kv_len - d.q_len;  // the query's absolute position
        int64_t hi = std::min(p + 1, d.kv_len);
        int64_t lo = d.window > 0 ? std::max<int64_t>(p - d.window + 1, 0) : 0;
        pairs += double(std::max<int64_t>(hi - lo, 0));
      }
    }
    return 4.0 * double(d.batch) * double(d.heads) * pairs * double(d.head_dim);
  }

  // Inside each call's scope: a device backend waits for the call's kernels, so the scope holds
  // their time rather than the launch's.
  void settle() {
    if (settle_) settle_();
  }

  Backend& inner_;
  std::function<void()> settle_;
};

}  // namespace

Backend& profiled(Backend& inner, std::function<void()> settle) {
  static std::mutex mutex;
  static std::map<Backend*, std::unique_ptr<ProfiledBackend>> wrappers;
  std::lock_guard<std::mutex> lock(mutex);
  auto& w = wrappers[&inner];
  if (!w) w = std::make_unique<ProfiledBackend>(inner, std::move(settle));
  return *w;
}

}  // namespace tessel::kernels
