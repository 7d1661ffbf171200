// SPDX-License-Identifier: Apache-2.0
// The meta backend's kernels and the FLOP and byte counts they report. Counting rules (written
// down once, here and in docs/PLANNER.md):
// - bytes: every input tensor is read once and every output written once, in full, at its dtype
//   (a kernel that accumulates into an output also reads it); a GEMM reads its operands once;
//   an embedding reads the rows it gathers, not the whole table.
// - FLOPs: a multiply-add is 2. GEMM 2*b*m*n*k. Attention over P visible query-key pairs per
//   (batch, head) with head width D: forward 4*D*P in matrix products (Q K^T and P V) plus 5*P
//   for the softmax (scale, max, exp, sum, normalise); backward 8*D*P in the four gradient
//   products (dV, dP, dQ, dK), 2*D*P to recompute the scores (flash-style, not model FLOPs) and
//   5*P for the softmax gradient. Element-wise ops: 1 per output element forward, 2 backward.
//   Softmax 5 per element (max, subtract, exp, sum, divide), backward 3. LayerNorm 8 per
//   element (mean, variance, normalise, affine), backward 12; RMSNorm 5 and 9. Cross-entropy 4
//   per logit, backward 3. Reductions 1 per input element. AdamW 12 per parameter. Dropout 2 per
//   element. RoPE 3 per element. Squared sums 2 per element. Grouped GEMM 2*M*K*N (every row
//   multiplied once). Gathers, scatters, copies and
//   conversions 0 (bytes only), an embedding's backward 1 per accumulated element.
#include "tessel/kernels/meta/meta_backend.h"

#include <algorithm>
#include <initializer_list>

#include "tessel/kernels/kernel_observer.h"

namespace tessel::kernels {

double attention_pairs(const AttentionDesc& desc) {
  if (!desc.causal) return double(desc.q_len) * double(desc.kv_len);
  double pairs = 0;
  for (int64_t i = 0; i < desc.q_len; ++i) {
    int64_t p = i + (desc.kv_len - desc.q_len);
    int64_t hi = std::min(p, desc.kv_len - 1);
    int64_t lo = desc.window > 0 ? std::max<int64_t>(0, p - desc.window + 1) : 0;
    if (hi >= lo) pairs += double(hi - lo + 1);
  }
  return pairs;
}

namespace {

void check_meta(std::string_view kernel, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    TESSEL_CHECK(!t->defined() || t->device().is_meta(), "meta backend: ", kernel,
                 " got a tensor of shape ", t->shape(), " on ", t->device().str(),
                 "; every tensor of a meta kernel must be on meta");
}

struct Report {
  KernelEvent e;
  explicit Report(std::string_view kernel, std::string_view detail = {}) {
    e.kernel = kernel;
    e.detail = detail;
  }
  Report& in(const Tensor& t) {
    if (t.defined()) {
      e.inputs.push_back(describe(t));
      e.bytes_read += double(t.nbytes());
    }
    return *this;
  }
  // An input of which only `elements` are read (an embedding's table, a GEMM's strided operand).
  Report& in_part(const Tensor& t, double elements) {
    e.inputs.push_back(describe(t));
    e.bytes_read += elements * double(t.element_size());
    return *this;
  }
  Report& out(const Tensor& t) {
    if (t.defined()) {
      e.outputs.push_back(describe(t));
      e.bytes_written += double(t.nbytes());
    }
    return *this;
  }
  Report& flops(double total, double matmul = 0) {
    e.flops = total;
    e.matmul_flops = matmul;
    return *this;
  }
  ~Report() { report_kernel(e); }
};

double n(const Tensor& t) {
  return t.defined() ? double(t.numel()) : 0.0;
}

class MetaBackend final : public Backend {
 public:
  std::string_view name() const override { return "meta"; }
  bool supports(Op, DType) const override { return true; }

  void gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, Tensor& c) override {
    check_meta("gemm", {&a, &b, &c});
    const double ba = d.stride_a == 0 ? 1 : double(d.batch);
    const double bb = d.stride_b == 0 ? 1 : double(d.batch);
    const double mnk = double(d.batch) * double(d.m) * double(d.n) * double(d.k);
    const double c_elems = double(d.batch) * double(d.m) * double(d.n);
    // The detail names the operands' storage ("nn", "nt", "tn", "tt"): a forward product and its
    // two gradient products of one shape run at different rates, which the planner tells apart.
    static constexpr std::string_view kLayouts[] = {"nn", "nt", "tn", "tt"};
    Report r("gemm", kLayouts[(d.trans_a ? 2 : 0) + (d.trans_b ? 1 : 0)]);
    r.in_part(a, ba * double(d.m) * double(d.k)).in_part(b, bb * double(d.k) * double(d.n));
    if (d.beta != 0.0) r.in_part(c, c_elems);  // accumulates: C is read too
    r.e.outputs.push_back(describe(c));
    r.e.bytes_written = c_elems * double(c.element_size());
    r.flops(2 * mnk, 2 * mnk);
  }

  void unary(UnaryOp op, const Tensor& x, Tensor& y, double) override {
    check_meta("unary", {&x, &y});
    Report(op_name(Op::Unary), unary_name(op)).in(x).out(y).flops(n(y));
  }
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                      double) override {
    check_meta("unary_backward", {&x, &y, &dy, &dx});
    // x or y (whichever the derivative needs; the caller passes both) and dy are read.
    const Tensor& read = unary_derivative_reads_y(op) && y.defined() ? y : x;
    Report(op_name(Op::UnaryBackward), unary_name(op)).in(read).in(dy).out(dx).flops(2 * n(dx));
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override {
    check_meta("binary", {&a, &b, &out});
    Report(op_name(Op::Binary), binary_name(op)).in(a).in(b).out(out).flops(n(out));
  }
  void reduce(ReduceOp op, const Tensor& x, std::span<const int>, Tensor& out) override {
    check_meta("reduce", {&x, &out});
    Report(op_name(Op::Reduce), reduce_name(op)).in(x).out(out).flops(n(x));
  }
  void softmax(const Tensor& x, Tensor& y, bool log) override {
    check_meta("softmax", {&x, &y});
    Report(op_name(Op::Softmax), log ? "log" : "").in(x).out(y).flops(5 * n(x));
  }
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override {
    check_meta("softmax_backward", {&y, &dy, &dx});
    Report(op_name(Op::SoftmaxBackward), log ? "log" : "").in(y).in(dy).out(dx).flops(3 * n(dx));
  }
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double, Tensor& y,
                  Tensor& mean, Tensor& rstd) override {
    check_meta("layer_norm", {&x, &w, &b, &y, &mean, &rstd});
    Report(op_name(Op::LayerNorm)).in(x).in(w).in(b).out(y).out(mean).out(rstd).flops(8 * n(x));
  }
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                           const Tensor& rstd, Tensor& dx, Tensor& dw, Tensor& db) override {
    check_meta("layer_norm_backward", {&dy, &x, &w, &mean, &rstd, &dx, &dw, &db});
    Report(op_name(Op::LayerNormBackward))
        .in(dy)
        .in(x)
        .in(w)
        .in(mean)
        .in(rstd)
        .out(dx)
        .out(dw)
        .out(db)
        .flops(12 * n(x));
  }
  void rms_norm(const Tensor& x, const Tensor& w, double, Tensor& y, Tensor& rstd) override {
    check_meta("rms_norm", {&x, &w, &y, &rstd});
    Report(op_name(Op::RmsNorm)).in(x).in(w).out(y).out(rstd).flops(5 * n(x));
  }
  void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                         Tensor& dx, Tensor& dw) override {
    check_meta("rms_norm_backward", {&dy, &x, &w, &rstd, &dx, &dw});
    Report(op_name(Op::RmsNormBackward))
        .in(dy)
        .in(x)
        .in(w)
        .in(rstd)
        .out(dx)
        .out(dw)
        .flops(9 * n(x));
  }
  void embedding(const Tensor& w, const Tensor& ids, Tensor& out) override {
    check_meta("embedding", {&w, &ids, &out});
    Report(op_name(Op::Embedding)).in_part(w, n(out)).in(ids).out(out);
  }
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dw) override {
    check_meta("embedding_backward", {&dout, &ids, &dw});
    // Reads and writes the rows it accumulates into (as many as dout has).
    Report r(op_name(Op::EmbeddingBackward));
    r.in(dout).in(ids).in_part(dw, n(dout)).flops(n(dout));
    r.e.outputs.push_back(describe(dw));
    r.e.bytes_written = n(dout) * double(dw.element_size());
  }
  void attention(const AttentionDesc& d, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& mask, Tensor& out, Tensor& lse) override {
    check_meta("attention", {&q, &k, &v, &mask, &out, &lse});
    const double p = attention_pairs(d) * double(d.batch) * double(d.heads);
    const double mm = 4 * double(d.head_dim) * p;
    Report(op_name(Op::Attention))
        .in(q)
        .in(k)
        .in(v)
        .in(mask)
        .out(out)
        .out(lse)
        .flops(mm + 5 * p, mm);
  }
  void attention_backward(const AttentionDesc& d, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& mask, const Tensor& out, const Tensor& lse,
                          const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override {
    check_meta("attention_backward", {&q, &k, &v, &mask, &out, &lse, &dout, &dq, &dk, &dv});
    const double p = attention_pairs(d) * double(d.batch) * double(d.heads);
    const double mm = 8 * double(d.head_dim) * p;
    Report(op_name(Op::AttentionBackward))
        .in(q)
        .in(k)
        .in(v)
        .in(mask)
        .in(out)
        .in(lse)
        .in(dout)
        .out(dq)
        .out(dk)
        .out(dv)
        .flops(mm + 2 * double(d.head_dim) * p + 5 * p, mm);
  }
  void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t, Tensor& losses,
                     Tensor& lse) override {
    check_meta("cross_entropy", {&logits, &targets, &losses, &lse});
    Report(op_name(Op::CrossEntropy))
        .in(logits)
        .in(targets)
        .out(losses)
        .out(lse)
        .flops(4 * n(logits));
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& dlosses, int64_t, Tensor& dlogits) override {
    check_meta("cross_entropy_backward", {&logits, &targets, &lse, &dlosses, &dlogits});
    Report(op_name(Op::CrossEntropyBackward))
        .in(logits)
        .in(targets)
        .in(lse)
        .in(dlosses)
        .out(dlogits)
        .flops(3 * n(logits));
  }
  void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams&) override {
    check_meta("adamw", {&param, &grad, &m, &v});
    Report(op_name(Op::AdamW))
        .in(param)
        .in(grad)
        .in(m)
        .in(v)
        .out(param)
        .out(m)
        .out(v)
        .flops(12 * n(param));
  }
  void dropout(const Tensor& x, Tensor& y, double, uint64_t, uint64_t) override {
    check_meta("dropout", {&x, &y});
    Report(op_name(Op::Dropout)).in(x).out(y).flops(2 * n(x));
  }
  void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
            bool inverse, Tensor& out) override {
    check_meta("rope", {&x, &cos, &sin, &positions, &out});
    // One cos and one sin row (D/2 each) per token.
    const double rows = n(positions), half = x.size(-1) / 2.0;
    Report(op_name(Op::Rope), inverse ? "inverse" : "")
        .in(x)
        .in_part(cos, rows * half)
        .in_part(sin, rows * half)
        .in(positions)
        .out(out)
        .flops(3 * n(x));
  }
  void square_sums(std::span<const Tensor> xs, std::span<double> out) override {
    Report r(op_name(Op::SquareSum));
    double elems = 0;
    for (const Tensor& x : xs) {
      check_meta("square_sum", {&x});
      r.in(x);
      elems += n(x);
    }
    r.e.bytes_written = double(out.size()) * sizeof(double);
    r.flops(2 * elems);
    std::fill(out.begin(), out.end(), 0.0);  // shape-only: no values to sum
  }
  void quant_matmul(quant::QuantType, const Tensor& x, const Tensor& w, Tensor& y) override {
    check_meta("quant_matmul", {&x, &w, &y});
    const double mnk = n(y) * double(x.size(-1));
    Report(op_name(Op::QuantMatmul)).in(x).in(w).out(y).flops(2 * mnk, 2 * mnk);
  }
  void paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_pool,
                      Tensor& v_pool) override {
    check_meta("paged_kv_store", {&k, &v, &slots, &k_pool, &v_pool});
    Report r(op_name(Op::PagedKvStore));
    r.in(k).in(v).in(slots);
    r.e.outputs.push_back(describe(k_pool));
    r.e.outputs.push_back(describe(v_pool));
    r.e.bytes_written = double(k.nbytes() + v.nbytes());
  }
  void paged_attention(const PagedAttentionDesc&, const Tensor& q, const Tensor& k_pool,
                       const Tensor& v_pool, const Tensor& block_tables, const Tensor& seq_lens,
                       const Tensor& query_starts, Tensor& out) override {
    check_meta("paged_attention",
               {&q, &k_pool, &v_pool, &block_tables, &seq_lens, &query_starts, &out});
    // Sequence lengths are data: every query is counted against a full block table (an upper
    // bound), reading that many keys and values once per sequence.
    const double keys = double(block_tables.size(-1)) * double(k_pool.size(1));
    const double heads = double(q.size(1)), dim = double(q.size(2));
    const double p = double(q.size(0)) * heads * keys;
    const double kv_row = double(k_pool.size(2)) * dim * double(k_pool.element_size());
    Report r(op_name(Op::PagedAttention));
    r.in(q)
        .in_part(k_pool, 0)
        .in_part(v_pool, 0)
        .in(block_tables)
        .in(seq_lens)
        .in(query_starts)
        .out(out)
        .flops(4 * dim * p + 5 * p, 4 * dim * p);
    r.e.bytes_read += 2 * double(block_tables.size(0)) * keys * kv_row;
  }
  void grouped_gemm(const GroupedGemmDesc& d, const Tensor& a, const Tensor& b,
                    const Tensor& offsets, Tensor& c) override {
    check_meta("grouped_gemm", {&a, &b, &offsets, &c});
    // Every row is multiplied once whatever the groups are (offsets are data): rows form
    // 2 M K N, weight form 2 M P Q. Every group's weight is counted as read (an upper bound when
    // groups are empty).
    const double m = double(a.size(0)), k = double(a.size(1));
    const double n = d.weight_grad ? double(b.size(1)) : double(c.size(1));
    const double flops = 2 * m * k * n;
    Report(op_name(Op::GroupedGemm), d.weight_grad ? "weight_grad" : "")
        .in(a)
        .in(b)
        .in(offsets)
        .out(c)
        .flops(flops, flops);
  }
  void convert(const Tensor& src, Tensor& dst) override {
    check_meta("convert", {&src, &dst});
    Report("convert").in(src).out(dst);
  }
};

}  // namespace

Backend& meta_backend() {
  static MetaBackend backend;
  return backend;
}

}  // namespace tessel::kernels
