// SPDX-License-Identifier: Apache-2.0
// The global gradient norm over spans and mesh axes, and the scaling of the same spans.
#include "tessel/train/optim/grad_norm.h"

#include <algorithm>
#include <cmath>

#include "tessel/autograd/backend_scope.h"
#include "tessel/core/error.h"
#include "tessel/kernels/backend.h"

namespace tessel::train {

namespace {

Tensor view_of(const GradSpan& s, const char* who) {
  TESSEL_CHECK(s.flat.defined() && s.flat.ndim() == 1 && s.begin >= 0 && s.begin <= s.end &&
                   s.end <= s.flat.numel(),
               who, ": span [", s.begin, ", ", s.end, ") of a ",
               s.flat.defined() ? s.flat.shape().str() : std::string("undefined"),
               " tensor (a 1-D tensor and a range inside it expected)");
  return s.flat.narrow(0, s.begin, s.end - s.begin);
}

}  // namespace

GradSpan whole_span(const Tensor& grad, int group, std::string param) {
  TESSEL_CHECK(grad.defined(), "whole_span: the gradient is undefined");
  return GradSpan{grad.detach().flatten(), 0, grad.numel(), group, std::move(param)};
}

GlobalSquareSum global_square_sum(std::span<const GradSpan> spans, int groups,
                                  std::span<const NormAxis> axes, const SpanHold& hold) {
  TESSEL_CHECK(groups >= 1, "global_square_sum: ", groups, " groups");
  std::vector<Tensor> views;
  views.reserve(spans.size());
  for (const GradSpan& s : spans) {
    TESSEL_CHECK(s.group >= 0 && s.group < groups, "global_square_sum: span group ", s.group,
                 " outside [0, ", groups, ")");
    views.push_back(view_of(s, "global_square_sum"));
  }
  std::vector<double> sums(views.size(), 0.0);
  if (!hold) {
    if (!views.empty()) autograd::backend_for(views.front().device()).square_sums(views, sums);
  } else {
    // A run of spans over one storage at a time, held while the kernel reads it.
    for (size_t lo = 0, hi = 0; lo < views.size(); lo = hi) {
      const Storage* storage = spans[lo].flat.storage_ptr().get();
      for (hi = lo + 1; hi < views.size() && spans[hi].flat.storage_ptr().get() == storage;) ++hi;
      const std::shared_ptr<void> held = hold(spans[lo].flat, false);
      const std::vector<Tensor> run(views.begin() + int64_t(lo), views.begin() + int64_t(hi));
      std::vector<double> part(run.size(), 0.0);
      autograd::backend_for(run.front().device()).square_sums(run, part);
      std::copy(part.begin(), part.end(), sums.begin() + int64_t(lo));
    }
  }
  std::vector<double> part(size_t(groups), 0.0);
  for (size_t i = 0; i < spans.size(); ++i) part[size_t(spans[i].group)] += sums[i];
  GlobalSquareSum out;
  double local = 0;
  for (double p : part) local += p;
  out.local_nonfinite = !std::isfinite(local);
  Tensor t = from_data(part, {int64_t(groups)});
  for (const NormAxis& axis : axes) {
    if (axis.comm == nullptr || axis.comm->size() == 1) continue;
    TESSEL_CHECK(axis.sums.size() == size_t(groups), "global_square_sum: an axis describes ",
                 axis.sums.size(), " groups, expected ", groups);
    // Groups that every rank of the axis holds alike travel from rank 0 only.
    if (axis.comm->rank() != 0)
      for (int g = 0; g < groups; ++g)
        if (!axis.sums[size_t(g)]) t.data<double>()[g] = 0;
    axis.comm->all_reduce(t, dist::ReduceOp::Sum);
  }
  for (int g = 0; g < groups; ++g) out.total += t.data<double>()[g];
  return out;
}

void scale_spans(std::span<const GradSpan> spans, double factor, const SpanHold& hold) {
  for (const GradSpan& s : spans) {
    const std::shared_ptr<void> held = hold ? hold(s.flat, true) : nullptr;
    Tensor v = view_of(s, "scale_spans");
    autograd::backend_for(v.device()).unary(kernels::UnaryOp::Scale, v, v, factor);
  }
}

}  // namespace tessel::train
