// SPDX-License-Identifier: Apache-2.0
// The bf16 / f16 kernels as load -> f32 kernel -> rounded store (see half_kernels.h for why).
// A Widen collects the f32 stand-ins of one call: inputs are converted on the way in, outputs
// (loaded first only where the kernel accumulates into them or leaves parts untouched) are
// rounded back when the call finishes. Kernels whose operands can be vocabulary-sized (GEMM,
// cross-entropy) do this a block of rows at a time.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/half_block_size.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/half_kernels.h"
#include "tessel/kernels/cpu/loops.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

namespace {

class Widen {
 public:
  // An f32 copy of a 16-bit tensor; any other tensor (f32 stats, ids, undefined) as it is.
  Tensor in(const Tensor& t) {
    if (!t.defined() || !is_half(t.dtype())) return t;
    Tensor f = empty(t.shape(), DType::F32, t.device());
    half_to_f32(t.data_ptr(), t.dtype(), f.data<float>(), t.numel());
    return f;
  }
  // An f32 stand-in for a 16-bit output, rounded into it by store(); `load` copies its contents
  // first (accumulating kernels, or ones that leave elements untouched).
  Tensor out(Tensor& t, bool load = false) {
    if (!t.defined() || !is_half(t.dtype())) return t;
    Tensor f = load ? in(t) : empty(t.shape(), DType::F32, t.device());
    outs_.emplace_back(f, t);
    return f;
  }
  void store() {
    for (auto& [f, t] : outs_) f32_to_half(f.data<float>(), t.data_ptr(), t.dtype(), t.numel());
    outs_.clear();
  }

 private:
  std::vector<std::pair<Tensor, Tensor>> outs_;
};

// Whether a GEMM writes every element of c (so c's old contents need not be loaded).
bool gemm_covers(const GemmDesc& d, const Tensor& c) {
  if (d.beta != 0) return false;
  const bool packed = d.ldc == d.n && (d.batch == 1 || d.stride_c == d.m * d.n);
  return packed && d.batch * d.m * d.n == c.numel();
}

int64_t block_rows(int64_t rows, int64_t bytes_per_row) {
  const int64_t fit =
      ::tessel::kernels::cpu::half_block_bytes() / std::max<int64_t>(bytes_per_row, 1);
  return std::clamp<int64_t>(fit, 1, std::max<int64_t>(rows, 1));
}

const uint16_t* bits(const Tensor& t) {
  return static_cast<const uint16_t*>(t.data_ptr());
}
uint16_t* bits(Tensor& t) {
  return static_cast<uint16_t*>(t.data_ptr());
}

}  // namespace

void half_gemm(Backend& f32, const GemmDesc& d, const Tensor& a, const Tensor& b, Tensor& c) {
  if (d.batch != 1) {
    // Batched products (attention heads) are small: whole operands, layouts kept, so the
    // descriptor applies unchanged to the f32 copies.
    Widen w;
    Tensor cf = w.out(c, !gemm_covers(d, c));
    f32.gemm(d, w.in(a), w.in(b), cf);
    w.store();
    return;
  }
  // One product: B whole (its layout kept), A and C a block of C's rows at a time.
  const DType dt = c.dtype();
  const Tensor bf = Widen().in(b);
  const int64_t mb = block_rows(d.m, 4 * (d.n + d.k));
  Tensor ap = empty({mb * d.k}, DType::F32), cp = empty({mb * d.n}, DType::F32);
  for (int64_t i0 = 0; i0 < d.m; i0 += mb) {
    const int64_t rows = std::min(mb, d.m - i0);
    GemmDesc p = d;
    p.m = rows;
    p.ldc = d.n;
    p.stride_a = p.stride_b = p.stride_c = 0;
    if (d.trans_a) {  // A is stored k x m: columns i0 .. i0 + rows of each of its k rows
      half_rows_to_f32(bits(a) + i0, dt, d.lda, ap.data<float>(), d.k, rows);
      p.lda = rows;
    } else {
      half_rows_to_f32(bits(a) + i0 * d.lda, dt, d.lda, ap.data<float>(), rows, d.k);
      p.lda = d.k;
    }
    if (d.beta != 0) half_rows_to_f32(bits(c) + i0 * d.ldc, dt, d.ldc, cp.data<float>(), rows, d.n);
    f32.gemm(p, ap, bf, cp);
    f32_rows_to_half(cp.data<float>(), bits(c) + i0 * d.ldc, dt, d.ldc, rows, d.n);
  }
}

void half_unary(Backend& f32, UnaryOp op, const Tensor& x, Tensor& y, double alpha) {
  Widen w;
  Tensor yf = w.out(y);
  f32.unary(op, w.in(x), yf, alpha);
  w.store();
}

void half_unary_backward(Backend& f32, UnaryOp op, const Tensor& x, const Tensor& y,
                         const Tensor& dy, Tensor& dx, double alpha) {
  // Only the operand the derivative reads is widened: x, or y = f(x) for the ops computed from it,
  // whose x is then read for its shape alone (y's copy stands in for it).
  const bool reads_y = unary_derivative_reads_y(op) && y.defined();
  Widen w;
  Tensor dxf = w.out(dx);
  const Tensor in = w.in(reads_y ? y : x);
  f32.unary_backward(op, in, reads_y ? in : Tensor(), w.in(dy), dxf, alpha);
  w.store();
}

void half_binary(Backend& f32, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  Widen w;
  Tensor of = w.out(out);
  f32.binary(op, w.in(a), w.in(b), of);
  w.store();
}

void half_reduce(Backend& f32, ReduceOp op, const Tensor& x, std::span<const int> dims,
                 Tensor& out) {
  Widen w;
  Tensor of = w.out(out);
  f32.reduce(op, w.in(x), dims, of);
  w.store();
}

void half_softmax(Backend& f32, const Tensor& x, Tensor& y, bool log) {
  Widen w;
  Tensor yf = w.out(y);
  f32.softmax(w.in(x), yf, log);
  w.store();
}

void half_softmax_backward(Backend& f32, const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  Widen w;
  Tensor dxf = w.out(dx);
  f32.softmax_backward(w.in(y), w.in(dy), dxf, log);
  w.store();
}

void half_layer_norm(Backend& f32, const Tensor& x, const Tensor& weight, const Tensor& bias,
                     double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  Widen w;
  Tensor yf = w.out(y);
  f32.layer_norm(w.in(x), w.in(weight), w.in(bias), eps, yf, mean, rstd);
  w.store();
}

void half_layer_norm_backward(Backend& f32, const Tensor& dy, const Tensor& x, const Tensor& weight,
                              const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight,
                              Tensor& dbias) {
  Widen w;
  Tensor dxf = w.out(dx), dwf = w.out(dweight), dbf = w.out(dbias);
  f32.layer_norm_backward(w.in(dy), w.in(x), w.in(weight), mean, rstd, dxf, dwf, dbf);
  w.store();
}

void half_rms_norm(Backend& f32, const Tensor& x, const Tensor& weight, double eps, Tensor& y,
                   Tensor& rstd) {
  Widen w;
  Tensor yf = w.out(y);
  f32.rms_norm(w.in(x), w.in(weight), eps, yf, rstd);
  w.store();
}

void half_rms_norm_backward(Backend& f32, const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  Widen w;
  Tensor dxf = w.out(dx), dwf = w.out(dweight);
  f32.rms_norm_backward(w.in(dy), w.in(x), w.in(weight), rstd, dxf, dwf);
  w.store();
}

void half_embedding_backward(Backend& f32, const Tensor& dout, const Tensor& ids, Tensor& dweight) {
  // Only the rows that ids name change. Rows are grouped by id: each group's gradient rows are
  // summed in f32 onto its dweight row, rounded once. No f32 copy of the whole table (the
  // vocabulary-sized one of GPT-2's tied embedding) is made.
  const int64_t n = ids.numel(), cols = dweight.size(dweight.ndim() - 1);
  const IndexView id(ids);
  std::vector<int64_t> order(size_t(n), 0);
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return id[a] < id[b]; });
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || id[order[size_t(i)]] != id[order[size_t(i - 1)]]) starts.push_back(i);
  starts.push_back(n);
  const DType dt = dweight.dtype();
  const int64_t groups = int64_t(starts.size()) - 1;
  parallel_for(0, groups, row_grain(cols), [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(cols)), row(static_cast<size_t>(cols));
    for (int64_t g = lo; g < hi; ++g) {
      uint16_t* dst = bits(dweight) + id[order[size_t(starts[size_t(g)])]] * cols;
      half_rows_to_f32(dst, dt, cols, acc.data(), 1, cols);
      for (int64_t i = starts[size_t(g)]; i < starts[size_t(g + 1)]; ++i) {
        half_rows_to_f32(bits(dout) + order[size_t(i)] * cols, dt, cols, row.data(), 1, cols);
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) acc[size_t(c)] += row[size_t(c)];
      }
      f32_rows_to_half(acc.data(), dst, dt, cols, 1, cols);
    }
  });
}

void half_attention(Backend& f32, const AttentionDesc& d, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& mask, Tensor& out, Tensor& lse) {
  Widen w;
  Tensor of = w.out(out);
  f32.attention(d, w.in(q), w.in(k), w.in(v), mask, of, lse);
  w.store();
}

void half_attention_backward(Backend& f32, const AttentionDesc& d, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& mask, const Tensor& out,
                             const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                             Tensor& dv) {
  Widen w;
  Tensor dqf = w.out(dq), dkf = w.out(dk), dvf = w.out(dv);
  f32.attention_backward(d, w.in(q), w.in(k), w.in(v), mask, w.in(out), lse, w.in(dout), dqf, dkf,
                         dvf);
  w.store();
}

// The cross-entropy kernels are row-wise over [N, V] logits: a block of rows at a time.
void half_cross_entropy(Backend& f32, const Tensor& logits, const Tensor& targets,
                        int64_t ignore_index, Tensor& losses, Tensor& lse) {
  // losses and lse are f32 stat tensors already: the loss never passes through 16 bits.
  const int64_t n = logits.size(0), rows = block_rows(n, 4 * logits.size(1));
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t len = std::min(rows, n - r0);
    Tensor lo = losses.narrow(0, r0, len), ls = lse.narrow(0, r0, len);
    f32.cross_entropy(Widen().in(logits.narrow(0, r0, len)), targets.narrow(0, r0, len),
                      ignore_index, lo, ls);
  }
}

void half_cross_entropy_backward(Backend& f32, const Tensor& logits, const Tensor& targets,
                                 const Tensor& lse, const Tensor& dlosses, int64_t ignore_index,
                                 Tensor& dlogits) {
  const int64_t n = logits.size(0), rows = block_rows(n, 8 * logits.size(1));
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t len = std::min(rows, n - r0);
    Widen w;
    Tensor out = dlogits.narrow(0, r0, len);
    Tensor df = w.out(out);
    f32.cross_entropy_backward(w.in(logits.narrow(0, r0, len)), targets.narrow(0, r0, len),
                               lse.narrow(0, r0, len), dlosses.narrow(0, r0, len), ignore_index,
                               df);
    w.store();
  }
}

void half_dropout(Backend& f32, const Tensor& x, Tensor& y, double p, uint64_t seed,
                  uint64_t offset) {
  Widen w;
  Tensor yf = w.out(y);
  f32.dropout(w.in(x), yf, p, seed, offset);
  w.store();
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
TESSEL_ISA_END
