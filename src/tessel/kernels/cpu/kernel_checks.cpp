// SPDX-License-Identifier: Apache-2.0
// Input validation shared by the CPU and the reference backends (see kernel_checks.h): every
// message names the op, the tensor and the wrong value next to the expected one.
#include "tessel/kernels/cpu/kernel_checks.h"

#include <algorithm>
#include <cmath>

namespace tessel::kernels {

namespace {

void need(Op op, const char* what, const Tensor& t) {
  TESSEL_CHECK(t.defined(), op_name(op), ": ", what, " is an undefined tensor");
}

// t is defined and has ref's dtype and shape.
void like(Op op, const char* what, const Tensor& t, const Tensor& ref, const char* ref_what) {
  need(op, what, t);
  TESSEL_CHECK(t.dtype() == ref.dtype(), op_name(op), ": ", what, " is ", dtype_name(t.dtype()),
               ", expected ", dtype_name(ref.dtype()), " (the dtype of ", ref_what, ")");
  TESSEL_CHECK(t.shape() == ref.shape(), op_name(op), ": ", what, " has shape ", t.shape(),
               ", expected ", ref.shape(), " (the shape of ", ref_what, ")");
}

// A per-row statistic: stat dtype of the input, one element per row.
void stat(Op op, const char* what, const Tensor& t, DType input, int64_t rows) {
  need(op, what, t);
  TESSEL_CHECK(t.dtype() == stat_dtype(input), op_name(op), ": ", what, " is ",
               dtype_name(t.dtype()), ", expected ", dtype_name(stat_dtype(input)),
               " (the stat dtype for ", dtype_name(input), " inputs)");
  TESSEL_CHECK(t.numel() == rows, op_name(op), ": ", what, " ", t.shape(), " has ", t.numel(),
               " elements, expected ", rows, " (one per row)");
}

// A per-column parameter: the input's dtype, shape [cols].
void vec(Op op, const char* what, const Tensor& t, DType input, int64_t cols) {
  TESSEL_CHECK(t.dtype() == input, op_name(op), ": ", what, " is ", dtype_name(t.dtype()),
               ", expected ", dtype_name(input), " (the dtype of x)");
  TESSEL_CHECK(t.shape() == Shape({cols}), op_name(op), ": ", what, " has shape ", t.shape(),
               ", expected [", cols, "] (the last dim of x)");
}

RowShape rows_of(Op op, const char* what, const Tensor& x) {
  TESSEL_CHECK(x.ndim() >= 1, op_name(op), ": ", what, " must have at least one dim, got shape ",
               x.shape());
  RowShape r;
  r.cols = x.size(-1);
  r.rows = 1;
  for (int d = 0; d + 1 < x.ndim(); ++d) r.rows *= x.size(d);
  return r;
}

void check_eps(Op op, double eps) {
  TESSEL_CHECK(std::isfinite(eps) && eps >= 0, op_name(op), ": eps must be finite and >= 0, got ",
               eps);
}

// Index tensor dtype and count, and every value in [0, limit) (or equal to *ignore). `what`
// names one index ("id", "target").
void check_indices(Op op, const char* what, const Tensor& ids, int64_t count, int64_t limit,
                   const int64_t* ignore) {
  need(op, what, ids);
  TESSEL_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64, op_name(op), ": ", what,
               "s must be i32 or i64, got ", dtype_name(ids.dtype()));
  TESSEL_CHECK(ids.numel() == count, op_name(op), ": ", what, "s ", ids.shape(), " has ",
               ids.numel(), " elements, expected ", count);
  // Host code cannot read device memory: a device backend checks the values on the device.
  if (!ids.device().is_cpu()) return;
  IndexView view(ids);
  for (int64_t i = 0; i < count; ++i) {
    int64_t id = view[i];
    if (id >= 0 && id < limit) continue;
    if (ignore != nullptr && id == *ignore) continue;
    if (ignore != nullptr)
      TESSEL_FAIL(op_name(op), ": ", what, " ", id, " at position ", i, " is out of range [0, ",
                  limit, ") for V = ", limit, " and is not ignore_index ", *ignore);
    TESSEL_FAIL(op_name(op), ": ", what, " ", id, " at position ", i, " is out of range [0, ",
                limit, ") for V = ", limit);
  }
}

}  // namespace

void check_supported(const Backend& backend, Op op, const Tensor& x, const char* what) {
  need(op, what, x);
  TESSEL_CHECK(backend.supports(op, x.dtype()), op_name(op), ": the ", backend.name(),
               " backend does not support ", what, " of dtype ", dtype_name(x.dtype()));
}

void validate_unary(const Backend& backend, const Tensor& x, const Tensor& y) {
  check_supported(backend, Op::Unary, x);
  like(Op::Unary, "y", y, x, "x");
}

void validate_unary_backward(const Backend& backend, const Tensor& x, const Tensor& y,
                             const Tensor& dy, const Tensor& dx) {
  check_supported(backend, Op::UnaryBackward, x);
  if (y.defined()) like(Op::UnaryBackward, "y", y, x, "x");
  like(Op::UnaryBackward, "dy", dy, x, "x");
  like(Op::UnaryBackward, "dx", dx, x, "x");
}

void validate_binary(const Backend& backend, BinaryOp op, const Tensor& a, const Tensor& b,
                     const Tensor& out) {
  check_supported(backend, Op::Binary, a, "a");
  need(Op::Binary, "b", b);
  need(Op::Binary, "out", out);
  TESSEL_CHECK(b.dtype() == a.dtype() && out.dtype() == a.dtype(), "binary ", binary_name(op),
               ": dtypes differ: a ", dtype_name(a.dtype()), ", b ", dtype_name(b.dtype()),
               ", out ", dtype_name(out.dtype()));
  int n = std::max(a.ndim(), b.ndim());
  Shape want;
  for (int i = 0; i < n; ++i) {
    int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    int64_t da = ia >= 0 ? a.size(ia) : 1, db = ib >= 0 ? b.size(ib) : 1;
    TESSEL_CHECK(da == db || da == 1 || db == 1, "binary ", binary_name(op), ": shapes ", a.shape(),
                 " and ", b.shape(), " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    want.push_back(da == 1 ? db : da);
  }
  TESSEL_CHECK(out.shape() == want, "binary ", binary_name(op), ": out has shape ", out.shape(),
               ", expected ", want, " (the broadcast of ", a.shape(), " and ", b.shape(), ")");
}

std::vector<int> validate_reduce(const Backend& backend, ReduceOp op, const Tensor& x,
                                 std::span<const int> dims, const Tensor& out) {
  check_supported(backend, Op::Reduce, x);
  need(Op::Reduce, "out", out);
  TESSEL_CHECK(out.dtype() == x.dtype(), "reduce ", reduce_name(op), ": out is ",
               dtype_name(out.dtype()), ", expected ", dtype_name(x.dtype()), " (the dtype of x)");
  std::vector<int> norm;
  for (int d : dims) {
    TESSEL_CHECK(d >= -x.ndim() && d < x.ndim(), "reduce ", reduce_name(op), ": dim ", d,
                 " is out of range for x of shape ", x.shape());
    int nd = d < 0 ? d + x.ndim() : d;
    TESSEL_CHECK(std::find(norm.begin(), norm.end(), nd) == norm.end(), "reduce ", reduce_name(op),
                 ": dim ", d, " is listed twice for x of shape ", x.shape());
    norm.push_back(nd);
  }
  std::sort(norm.begin(), norm.end());
  Shape want = x.shape();
  for (int d : norm) want[d] = 1;
  TESSEL_CHECK(out.shape() == want, "reduce ", reduce_name(op), ": out has shape ", out.shape(),
               ", expected ", want, " (x ", x.shape(), " with the reduced dims set to 1)");
  if (op == ReduceOp::Max || op == ReduceOp::Min)
    for (int d : norm)
      TESSEL_CHECK(x.size(d) > 0, "reduce ", reduce_name(op), ": dim ", d, " of x ", x.shape(),
                   " is empty; ", reduce_name(op), " of nothing is undefined");
  return norm;
}

RowShape validate_softmax(const Backend& backend, const Tensor& x, const Tensor& y) {
  check_supported(backend, Op::Softmax, x);
  like(Op::Softmax, "y", y, x, "x");
  return rows_of(Op::Softmax, "x", x);
}

RowShape validate_softmax_backward(const Backend& backend, const Tensor& y, const Tensor& dy,
                                   const Tensor& dx) {
  check_supported(backend, Op::SoftmaxBackward, y, "y");
  like(Op::SoftmaxBackward, "dy", dy, y, "y");
  like(Op::SoftmaxBackward, "dx", dx, y, "y");
  return rows_of(Op::SoftmaxBackward, "y", y);
}

RowShape validate_layer_norm(const Backend& backend, const Tensor& x, const Tensor& weight,
                             const Tensor& bias, double eps, const Tensor& y, const Tensor& mean,
                             const Tensor& rstd) {
  constexpr Op kOp = Op::LayerNorm;
  check_supported(backend, kOp, x);
  RowShape r = rows_of(kOp, "x", x);
  if (weight.defined()) vec(kOp, "weight", weight, x.dtype(), r.cols);
  if (bias.defined()) vec(kOp, "bias", bias, x.dtype(), r.cols);
  check_eps(kOp, eps);
  like(kOp, "y", y, x, "x");
  if (mean.defined()) stat(kOp, "mean", mean, x.dtype(), r.rows);
  if (rstd.defined()) stat(kOp, "rstd", rstd, x.dtype(), r.rows);
  return r;
}

RowShape validate_layer_norm_backward(const Backend& backend, const Tensor& dy, const Tensor& x,
                                      const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& dx, const Tensor& dweight,
                                      const Tensor& dbias) {
  constexpr Op kOp = Op::LayerNormBackward;
  check_supported(backend, kOp, x);
  RowShape r = rows_of(kOp, "x", x);
  like(kOp, "dy", dy, x, "x");
  if (weight.defined()) vec(kOp, "weight", weight, x.dtype(), r.cols);
  stat(kOp, "mean", mean, x.dtype(), r.rows);
  stat(kOp, "rstd", rstd, x.dtype(), r.rows);
  like(kOp, "dx", dx, x, "x");
  if (dweight.defined()) vec(kOp, "dweight", dweight, x.dtype(), r.cols);
  if (dbias.defined()) vec(kOp, "dbias", dbias, x.dtype(), r.cols);
  return r;
}

RowShape validate_rms_norm(const Backend& backend, const Tensor& x, const Tensor& weight,
                           double eps, const Tensor& y, const Tensor& rstd) {
  constexpr Op kOp = Op::RmsNorm;
  check_supported(backend, kOp, x);
  RowShape r = rows_of(kOp, "x", x);
  if (weight.defined()) vec(kOp, "weight", weight, x.dtype(), r.cols);
  check_eps(kOp, eps);
  like(kOp, "y", y, x, "x");
  if (rstd.defined()) stat(kOp, "rstd", rstd, x.dtype(), r.rows);
  return r;
}

RowShape validate_rms_norm_backward(const Backend& backend, const Tensor& dy, const Tensor& x,
                                    const Tensor& weight, const Tensor& rstd, const Tensor& dx,
                                    const Tensor& dweight) {
  constexpr Op kOp = Op::RmsNormBackward;
  check_supported(backend, kOp, x);
  RowShape r = rows_of(kOp, "x", x);
  like(kOp, "dy", dy, x, "x");
  if (weight.defined()) vec(kOp, "weight", weight, x.dtype(), r.cols);
  stat(kOp, "rstd", rstd, x.dtype(), r.rows);
  like(kOp, "dx", dx, x, "x");
  if (dweight.defined()) vec(kOp, "dweight", dweight, x.dtype(), r.cols);
  return r;
}

namespace {
// Shared by embedding forward and backward: table [V, C], rows tensor [..., C] with N rows.
RowShape check_table_rows(Op op, const char* table_what, const Tensor& table, const char* rows_what,
                          const Tensor& rows, const Tensor& ids) {
  TESSEL_CHECK(table.ndim() == 2, op_name(op), ": ", table_what, " must be [V, C], got shape ",
               table.shape());
  need(op, rows_what, rows);
  TESSEL_CHECK(rows.dtype() == table.dtype(), op_name(op), ": ", rows_what, " is ",
               dtype_name(rows.dtype()), ", expected ", dtype_name(table.dtype()),
               " (the dtype of ", table_what, ")");
  need(op, "ids", ids);
  int64_t n = ids.numel(), c = table.size(1);
  TESSEL_CHECK(rows.ndim() >= 1 && rows.size(-1) == c && rows.numel() == n * c, op_name(op), ": ",
               rows_what, " has shape ", rows.shape(), ", expected [", n, ", ", c,
               "] (one row of C = ", c, " per id)");
  check_indices(op, "id", ids, n, table.size(0), nullptr);
  return {n, c};
}
}  // namespace

RowShape validate_embedding(const Backend& backend, const Tensor& weight, const Tensor& ids,
                            const Tensor& out) {
  check_supported(backend, Op::Embedding, weight, "weight");
  return check_table_rows(Op::Embedding, "weight", weight, "out", out, ids);
}

RowShape validate_embedding_backward(const Backend& backend, const Tensor& dout, const Tensor& ids,
                                     const Tensor& dweight) {
  check_supported(backend, Op::EmbeddingBackward, dweight, "dweight");
  return check_table_rows(Op::EmbeddingBackward, "dweight", dweight, "dout", dout, ids);
}

RowShape validate_cross_entropy(const Backend& backend, const Tensor& logits, const Tensor& targets,
                                int64_t ignore_index, const Tensor& losses, const Tensor& lse) {
  constexpr Op kOp = Op::CrossEntropy;
  check_supported(backend, kOp, logits, "logits");
  RowShape r = rows_of(kOp, "logits", logits);
  stat(kOp, "losses", losses, logits.dtype(), r.rows);
  stat(kOp, "lse", lse, logits.dtype(), r.rows);
  check_indices(kOp, "target", targets, r.rows, r.cols, &ignore_index);
  return r;
}

RowShape validate_cross_entropy_backward(const Backend& backend, const Tensor& logits,
                                         const Tensor& targets, const Tensor& lse,
                                         const Tensor& dlosses, int64_t ignore_index,
                                         const Tensor& dlogits) {
  constexpr Op kOp = Op::CrossEntropyBackward;
  check_supported(backend, kOp, logits, "logits");
  RowShape r = rows_of(kOp, "logits", logits);
  stat(kOp, "lse", lse, logits.dtype(), r.rows);
  stat(kOp, "dlosses", dlosses, logits.dtype(), r.rows);
  like(kOp, "dlogits", dlogits, logits, "logits");
  check_indices(kOp, "target", targets, r.rows, r.cols, &ignore_index);
  return r;
}

void validate_adamw(const Backend& backend, const Tensor& param, const Tensor& grad,
                    const Tensor& m, const Tensor& v, const AdamWParams& p) {
  constexpr Op kOp = Op::AdamW;
  check_supported(backend, kOp, param, "param");
  like(kOp, "grad", grad, param, "param");
  for (const auto& [what, t] : {std::pair<const char*, const Tensor*>{"m", &m}, {"v", &v}}) {
    need(kOp, what, *t);
    TESSEL_CHECK(t->dtype() == stat_dtype(param.dtype()), "adamw: ", what, " is ",
                 dtype_name(t->dtype()), ", expected ", dtype_name(stat_dtype(param.dtype())),
                 " (the moment dtype for ", dtype_name(param.dtype()), " params)");
    TESSEL_CHECK(t->shape() == param.shape(), "adamw: ", what, " has shape ", t->shape(),
                 ", expected ", param.shape(), " (the shape of param)");
  }
  TESSEL_CHECK(p.step >= 1, "adamw: step must be >= 1 (1-based), got ", p.step);
  TESSEL_CHECK(p.beta1 >= 0 && p.beta1 < 1 && p.beta2 >= 0 && p.beta2 < 1,
               "adamw: betas must lie in [0, 1), got beta1 ", p.beta1, " beta2 ", p.beta2);
  TESSEL_CHECK(
      std::isfinite(p.lr) && std::isfinite(p.weight_decay) && std::isfinite(p.eps) && p.eps >= 0,
      "adamw: lr, weight_decay and eps must be finite (eps >= 0), got lr ", p.lr, " weight_decay ",
      p.weight_decay, " eps ", p.eps);
}

void validate_dropout(const Backend& backend, const Tensor& x, const Tensor& y, double p) {
  check_supported(backend, Op::Dropout, x);
  like(Op::Dropout, "y", y, x, "x");
  TESSEL_CHECK(p >= 0 && p <= 1, "dropout: p must lie in [0, 1], got ", p);
}

void validate_square_sums(const Backend& backend, std::span<const Tensor> xs,
                          std::span<const double> out) {
  TESSEL_CHECK(xs.size() == out.size(), "square_sum: ", xs.size(), " tensors but ", out.size(),
               " outputs");
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string what = "tensor " + std::to_string(i);
    check_supported(backend, Op::SquareSum, xs[i], what.c_str());
    TESSEL_CHECK(xs[i].device().is_cpu(), "square_sum: ", what, " ", xs[i].shape(), " is on ",
                 xs[i].device().str(), ", expected host memory");
  }
}

RopeShape validate_rope(const Backend& backend, const Tensor& x, const Tensor& cos,
                        const Tensor& sin, const Tensor& positions, const Tensor& out) {
  constexpr Op kOp = Op::Rope;
  check_supported(backend, kOp, x);
  TESSEL_CHECK(x.ndim() == 4, "rope: x must be [B, T, H, D], got shape ", x.shape());
  const int64_t b = x.size(0), t = x.size(1), d = x.size(3);
  TESSEL_CHECK(d > 0 && d % 2 == 0, "rope: the head dim D of x ", x.shape(),
               " must be even and > 0, got ", d);
  like(kOp, "out", out, x, "x");
  const DType table = stat_dtype(x.dtype());
  for (const auto& [what, tab] :
       {std::pair<const char*, const Tensor*>{"cos", &cos}, {"sin", &sin}}) {
    need(kOp, what, *tab);
    TESSEL_CHECK(tab->dtype() == table, "rope: ", what, " is ", dtype_name(tab->dtype()),
                 ", expected ", dtype_name(table), " (the table dtype for ", dtype_name(x.dtype()),
                 " x)");
    TESSEL_CHECK(tab->ndim() == 2 && tab->size(1) == d / 2, "rope: ", what, " has shape ",
                 tab->shape(), ", expected [P, ", d / 2, "] (half the head dim of x ", x.shape(),
                 ")");
  }
  TESSEL_CHECK(sin.shape() == cos.shape(), "rope: sin ", sin.shape(), " and cos ", cos.shape(),
               " must have the same shape");
  need(kOp, "positions", positions);
  TESSEL_CHECK(positions.dtype() == DType::I32 || positions.dtype() == DType::I64,
               "rope: positions must be i32 or i64, got ", dtype_name(positions.dtype()));
  TESSEL_CHECK(positions.shape() == Shape({b, t}), "rope: positions has shape ", positions.shape(),
               ", expected [", b, ", ", t, "] (the [B, T] of x ", x.shape(), ")");
  const int64_t rows = cos.size(0);
  if (!positions.device().is_cpu()) return {b * t, x.size(2), d, rows};  // checked on the device
  IndexView pos(positions);
  for (int64_t i = 0; i < b * t; ++i) {
    int64_t p = pos[i];
    TESSEL_CHECK(p >= 0 && p < rows, "rope: position ", p, " at [", i / t, ", ", i % t,
                 "] is out of range [0, ", rows, ") (the cos / sin tables have ", rows, " rows)");
  }
  return {b * t, x.size(2), d, rows};
}

QuantMatmulShape validate_quant_matmul(const Backend& backend, quant::QuantType type,
                                       const Tensor& x, const Tensor& w, const Tensor& y) {
  const Op op = Op::QuantMatmul;
  check_supported(backend, op, x);
  need(op, "w", w);
  need(op, "y", y);
  TESSEL_CHECK(x.ndim() == 2 && w.ndim() == 2 && y.ndim() == 2,
               "quant_matmul: x, w and y must be 2-D, got ", x.shape(), ", ", w.shape(), ", ",
               y.shape());
  TESSEL_CHECK(w.dtype() == DType::I8, "quant_matmul: w holds the raw ",
               quant::quant_type_name(type), " blocks as i8, got ", dtype_name(w.dtype()));
  QuantMatmulShape s;
  s.m = x.size(0), s.k = x.size(1), s.n = w.size(0);
  s.row_bytes = quant::row_bytes(type, s.k);
  TESSEL_CHECK(w.size(1) == s.row_bytes, "quant_matmul: a ", quant::quant_type_name(type),
               " row of ", s.k, " weights takes ", s.row_bytes, " bytes, but w is ", w.shape());
  TESSEL_CHECK(y.dtype() == x.dtype() && y.shape() == Shape({s.m, s.n}), "quant_matmul: y must be ",
               dtype_name(x.dtype()), " [", s.m, ", ", s.n, "], got ", dtype_name(y.dtype()), " ",
               y.shape());
  return s;
}

}  // namespace tessel::kernels
