// SPDX-License-Identifier: Apache-2.0
// Reference reduction over any set of dims: every input element is visited once and folded into
// the output element its index maps to (reduced dims set to 0). Sums accumulate in double; Max
// and Min propagate NaN.
#include <cmath>
#include <limits>
#include <vector>

#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::reduce(ReduceOp op, const Tensor& x, std::span<const int> dims,
                              Tensor& out) {
  std::vector<int> reduced = validate_reduce(*this, op, x, dims, out);
  const Shape& shape = x.shape();
  std::vector<bool> is_reduced(size_t(shape.ndim()), false);
  int64_t count = 1;
  for (int d : reduced) {
    is_reduced[size_t(d)] = true;
    count *= shape[d];
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double init = op == ReduceOp::Max ? -kInf : (op == ReduceOp::Min ? kInf : 0.0);
  std::vector<double> acc(size_t(out.numel()), init);

  const double* xp = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rest = i, out_index = 0, out_stride = 1;
    for (int d = shape.ndim() - 1; d >= 0; --d) {
      int64_t coord = rest % shape[d];
      rest /= shape[d];
      if (!is_reduced[size_t(d)]) {
        out_index += coord * out_stride;
        out_stride *= shape[d];
      }
    }
    double v = xp[i];
    double& a = acc[size_t(out_index)];
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Mean:
        a += v;
        break;
      case ReduceOp::Max:
        a = (std::isnan(a) || std::isnan(v)) ? NAN : (v > a ? v : a);
        break;
      case ReduceOp::Min:
        a = (std::isnan(a) || std::isnan(v)) ? NAN : (v < a ? v : a);
        break;
    }
  }
  double* op_out = out.data<double>();
  for (int64_t i = 0; i < out.numel(); ++i)
    op_out[i] = op == ReduceOp::Mean ? acc[size_t(i)] / double(count) : acc[size_t(i)];
}

}  // namespace tessel::kernels

namespace tessel::kernels {

// Element order, one f64 accumulator: the plain definition the blocked CPU kernel is checked
// against.
void ReferenceBackend::square_sums(std::span<const Tensor> xs, std::span<double> out) {
  validate_square_sums(*this, xs, out);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double* x = xs[i].data<double>();
    double s = 0;
    for (int64_t j = 0; j < xs[i].numel(); ++j) s += x[j] * x[j];
    out[i] = s;
  }
}

}  // namespace tessel::kernels
