// SPDX-License-Identifier: Apache-2.0
// Global gradient-norm clipping (Pascanu et al. 2013), with torch.nn.utils.clip_grad_norm_'s
// factor max_norm / (norm + 1e-6), for parameters on one process: the norm is
// optim/grad_norm.h's global square sum with no mesh axis (the backend's multi-tensor kernel, the
// same value for every thread count) and the scaling its scale_spans.
#include "tessel/train/optim/grad_clip.h"

#include <cmath>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/train/optim/grad_norm.h"

namespace tessel::train {

namespace {

// The defined gradients as whole spans, checked to be floating point.
std::vector<GradSpan> grad_spans(const std::vector<Tensor>& params, const char* what) {
  std::vector<GradSpan> spans;
  for (size_t i = 0; i < params.size(); ++i) {
    TESSEL_CHECK(params[i].defined(), what, ": parameter ", i, " is an undefined tensor");
    const Tensor g = params[i].grad();
    if (!g.defined()) continue;
    TESSEL_CHECK(dtype_is_float(g.dtype()), what, ": the gradient of parameter ", i, " ('",
                 params[i].name(), "') is ", dtype_name(g.dtype()), ", expected a float dtype");
    spans.push_back(whole_span(g));
  }
  return spans;
}

}  // namespace

double grad_square_sum(const std::vector<Tensor>& params) {
  return global_square_sum(grad_spans(params, "grad_square_sum"), 1, {}).total;
}

double grad_norm(const std::vector<Tensor>& params) {
  return std::sqrt(grad_square_sum(params));
}

void scale_grads(const std::vector<Tensor>& params, double factor) {
  scale_spans(grad_spans(params, "scale_grads"), factor);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  TESSEL_CHECK(std::isfinite(max_norm) && max_norm > 0,
               "clip_grad_norm: max_norm must be finite and > 0, got ", max_norm);
  const double norm = grad_norm(params);
  if (!std::isfinite(norm)) return norm;  // the caller skips the step; the grads stay as they are
  const double factor = max_norm / (norm + 1e-6);
  if (factor < 1.0) scale_grads(params, factor);
  return norm;
}

}  // namespace tessel::train
