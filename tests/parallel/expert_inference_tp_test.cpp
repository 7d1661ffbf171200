// SPDX-License-Identifier: Apache-2.0
// Expert-parallel inference composed with expert tensor parallelism on in-process thread worlds,
// the layout of `generate|serve --ep E --tp T` (docs/MOE.md, "Tensor-parallel inference"): ranks
// in tp groups of adjacent ranks, ep groups of the ranks with one tp index (rank r = ep rank r / T,
// tp rank r % T); each rank keeps E / ep experts of a layer of 6 (hidden 13) and its columns of
// each expert's 33 (17 + 16 over tp 2, 11 each over 3). Every rank runs the same 7 tokens (a
// prefill) and 1 token (a decode step) in eval mode and must give the serial layer's output (the
// sum over tp only reorders the down projection's sums: within 1e-12 in f64, 1e-5 in f32) with
// the same routing and drops, whichever of the two splits is applied first: SwiGLU experts with
// Mixtral's gates, GELU experts with Switch's gates, the capacity dropping pairs in eval and the
// output bias added once after the sum; an ep group whose experts get no row still joins both
// collectives.
#include <gtest/gtest.h>

#include <cmath>

#include "common/thread_checks.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/nn/moe.h"
#include "tessel/parallel/expert/expert_inference.h"
#include "tessel/parallel/expert/expert_tensor_parallel.h"

namespace tessel::parallel {
namespace {

using tessel::test::run_thread_world;
using tessel::test::ThreadChecks;

constexpr int64_t kHidden = 13, kWidth = 33, kExperts = 6;

nn::MoEConfig config(nn::ExpertKind kind) {
  nn::MoEConfig c;
  c.hidden = kHidden;
  c.ffn_hidden = kWidth;
  c.num_experts = kExperts;
  c.top_k = 2;
  c.expert = kind;
  c.gate_form = kind == nn::ExpertKind::SwiGLU ? nn::GateForm::Mixtral : nn::GateForm::Switch;
  c.capacity_factor = 0.5;  // drops pairs (in eval too: drop_in_eval)
  c.drop_tokens = kind == nn::ExpertKind::Gelu;
  return c;
}

Tensor tokens(int64_t count, DType dtype, bool positive) {
  std::vector<double> v(size_t(count * kHidden));
  for (size_t i = 0; i < v.size(); ++i) {
    const double u = std::sin(0.37 * double(i + 3));
    v[i] = positive ? 0.2 + std::abs(u) : u;
  }
  return from_data(v, Shape{count, kHidden}).to(dtype);
}

// The same layer on every rank (one seed); `last_two`: only the last two experts' router rows are
// non-zero and every token positive, so every token picks experts 4 and 5 (ep rank 0 idle).
std::shared_ptr<nn::MoE> layer(nn::ExpertKind kind, DType dtype, bool last_two) {
  Generator g(29);
  auto moe = std::make_shared<nn::MoE>(config(kind), nn::Init::normal(&g, 0.5, dtype));
  if (last_two) {
    Tensor w = moe->router->weight;
    std::vector<double> v = w.to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = i >= size_t(4 * kHidden) ? 0.1 + 0.01 * double(i % kHidden) : 0.0;
    w.copy_from(from_data(v, w.shape()).to(dtype));
  }
  moe->eval();
  return moe;
}

struct Case {
  int ep, tp;
  nn::ExpertKind kind;
  DType dtype;
  bool last_two = false;
  bool ffn_first = false;  // split the columns over tp before the experts over ep
};

void check(const Case& c) {
  ThreadChecks checks;
  const double tol = c.dtype == DType::F64 ? 1e-12 : 1e-5;
  run_thread_world(c.ep * c.tp, [&](dist::CommPtr world) {
    const int ep_rank = world->rank() / c.tp, tp_rank = world->rank() % c.tp;
    dist::CommPtr tp = world->split(ep_rank, world->rank(), "tp");
    dist::CommPtr ep = world->split(tp_rank, world->rank(), "ep");
    const std::string what = "ep rank " + std::to_string(ep_rank) + " of " + std::to_string(c.ep) +
                             ", tp rank " + std::to_string(tp_rank) + " of " +
                             std::to_string(c.tp) + (c.ffn_first ? " (columns first)" : "");
    autograd::NoGradGuard no_grad;
    auto serial = layer(c.kind, c.dtype, c.last_two);
    auto split = layer(c.kind, c.dtype, c.last_two);
    if (c.ffn_first) parallelize_expert_ffn(*split, tp);
    const ExpertParallelResult res = parallelize_experts_inference(*split, ep);
    if (!c.ffn_first) parallelize_expert_ffn(*split, tp);
    // The balanced uneven rule: the first kWidth % tp ranks hold one column more.
    const int64_t columns = kWidth / c.tp + (tp_rank < kWidth % c.tp ? 1 : 0);
    const int64_t first_column =
        tp_rank * (kWidth / c.tp) + std::min<int64_t>(tp_rank, kWidth % c.tp);
    checks.expect(res.layers == 1 && split->experts->experts() == kExperts / c.ep &&
                      split->experts->first_expert() == ep_rank * (kExperts / c.ep) &&
                      split->experts->ffn_hidden() == columns &&
                      split->experts->first_ffn_column() == first_column,
                  what + ": this rank's experts and columns kept");
    for (const int64_t count : {int64_t(7), int64_t(1)}) {
      const Tensor x = tokens(count, c.dtype, c.last_two);
      const Tensor want = serial->forward(x).output;
      const Tensor got = split->forward(x).output;
      checks.expect_close(got, want, tol, what + ", " + std::to_string(count) + " tokens");
      checks.expect(
          split->last_stats().tokens_per_expert == serial->last_stats().tokens_per_expert &&
              split->last_stats().dropped == serial->last_stats().dropped,
          what + ": the same routing and drops");
      if (c.kind == nn::ExpertKind::Gelu && count == 7 && !c.last_two)
        checks.expect(split->last_stats().dropped > 0, what + ": pairs dropped");
    }
    if (c.last_two)
      checks.expect(split->last_stats().tokens_per_expert[0] == 0, what + ": expert 0 idle");
  });
  checks.verify();
}

TEST(ExpertInferenceTp, SwigluOverTwoEpByTwoTpEqualsTheSerialLayer) {
  check({2, 2, nn::ExpertKind::SwiGLU, DType::F64});
  check({2, 2, nn::ExpertKind::SwiGLU, DType::F32});
  check({2, 2, nn::ExpertKind::SwiGLU, DType::F64, false, /*ffn_first=*/true});
}

TEST(ExpertInferenceTp, GeluWithDropsOverThreeEpByTwoTpEqualsTheSerialLayer) {
  check({3, 2, nn::ExpertKind::Gelu, DType::F64});
  check({3, 2, nn::ExpertKind::Gelu, DType::F32});
}

TEST(ExpertInferenceTp, GeluOverTwoEpByThreeTpColumnsFirst) {
  check({2, 3, nn::ExpertKind::Gelu, DType::F64, false, /*ffn_first=*/true});
}

TEST(ExpertInferenceTp, AnEpGroupWhoseExpertsReceiveNothingStillJoinsBothCollectives) {
  check({3, 2, nn::ExpertKind::SwiGLU, DType::F64, /*last_two=*/true});
  check({2, 2, nn::ExpertKind::Gelu, DType::F64, /*last_two=*/true, /*ffn_first=*/true});
}

}  // namespace
}  // namespace tessel::parallel
