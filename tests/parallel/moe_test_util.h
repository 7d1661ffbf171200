// SPDX-License-Identifier: Apache-2.0
// What the expert-parallel and expert-tensor-parallel thread-world tests share: a rank's tokens,
// the fixed objective every layout differentiates, and the check that a split MoE layer's step
// equals the serial layer's (output, auxiliary loss, routing and drops, input and router
// gradients; f64, 1e-12).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "common/thread_checks.h"
#include "tessel/nn/moe.h"
#include "tessel/ops/ops.h"

namespace tessel::parallel::test_util {

// Rank r's tokens: `count` rows of `hidden` values, f64, requiring grad; `positive` keeps every
// value above 0.2 (for routers built to send every token to chosen experts).
inline Tensor moe_tokens(int rank, int64_t count, int64_t hidden, bool positive = false) {
  std::vector<double> v(size_t(count * hidden));
  for (size_t i = 0; i < v.size(); ++i) {
    const double u = std::sin(0.37 * double(i + 1) + 1.3 * rank);
    v[i] = positive ? 0.2 + std::abs(u) : u;
  }
  Tensor x = from_data(v, Shape{count, hidden});
  x.set_requires_grad(true);
  return x;
}

// The same fixed projection of the output on every layout, plus the auxiliary loss.
inline Tensor moe_objective(const nn::MoE::Output& out) {
  const int64_t n = out.output.numel();
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) w[size_t(i)] = std::cos(0.11 * double(i));
  return ops::add(ops::sum(ops::mul(out.output, from_data(w, out.output.shape()))), out.aux_loss);
}

inline Tensor grad_or_zeros(const Tensor& t) {
  return t.grad().defined() ? t.grad() : zeros(t.shape(), t.dtype());
}

// The split layer's step (`got` from input `xp`) against the serial one's (`want` from `xs`),
// after both backward passes.
inline void expect_same_moe_step(tessel::test::ThreadChecks& checks, nn::MoE& split,
                                 const nn::MoE::Output& got, const Tensor& xp, nn::MoE& serial,
                                 const nn::MoE::Output& want, const Tensor& xs,
                                 const std::string& what) {
  checks.expect_close(got.output, want.output, 1e-12, what + ": output");
  checks.expect_close(got.aux_loss, want.aux_loss, 1e-12, what + ": aux loss");
  checks.expect(split.last_stats().dropped == serial.last_stats().dropped &&
                    split.last_stats().tokens_per_expert == serial.last_stats().tokens_per_expert,
                what + ": the same routing and drops");
  checks.expect_close(xp.grad(), xs.grad(), 1e-12, what + ": input gradient");
  checks.expect_close(split.router->weight.grad(), serial.router->weight.grad(), 1e-12,
                      what + ": router gradient");
}

}  // namespace tessel::parallel::test_util
