// SPDX-License-Identifier: Apache-2.0
// Expert-parallel inference on in-process thread worlds: MoE layers of 6 experts (hidden 13,
// experts 33 wide, top-2) split over 2 and 3 ranks, every rank running the same 7 tokens (a
// prefill) and 1 token (a decode step) in eval mode, must equal the serial layer bit for bit (f64
// and f32): SwiGLU experts with Mixtral's gates and no capacity, GELU experts with Switch's gates
// and GShard's capacity applied in eval too (pairs dropped, the same ones); a rank whose experts
// receive no row still takes part in the gather.
// Refusals: 7 experts over 2 ranks, a model without MoE layer, a backward through the dispatch,
// and ranks that routed different batches.
#include "tessel/parallel/expert/expert_inference.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/thread_checks.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/nn/moe.h"

namespace tessel::parallel {
namespace {

using tessel::test::run_thread_world;
using tessel::test::ThreadChecks;

constexpr int64_t kHidden = 13;

nn::MoEConfig config(nn::ExpertKind kind, int64_t experts = 6) {
  nn::MoEConfig c;
  c.hidden = kHidden;
  c.ffn_hidden = 33;
  c.num_experts = experts;
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
    const double u = std::sin(0.41 * double(i + 1));
    v[i] = positive ? 0.2 + std::abs(u) : u;
  }
  return from_data(v, Shape{count, kHidden}).to(dtype);
}

// The same layer on every rank (one seed); `last_two`: only the last two experts' router rows are
// non-zero and every token positive, so every token picks experts 4 and 5.
std::shared_ptr<nn::MoE> layer(nn::ExpertKind kind, DType dtype, bool last_two) {
  Generator g(23);
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

void check_layer(int n, nn::ExpertKind kind, DType dtype, bool last_two) {
  ThreadChecks checks;
  run_thread_world(n, [&](dist::CommPtr world) {
    const std::string what = "rank " + std::to_string(world->rank()) + " of " + std::to_string(n);
    autograd::NoGradGuard no_grad;
    auto serial = layer(kind, dtype, last_two);
    auto split = layer(kind, dtype, last_two);
    const ExpertParallelResult res = parallelize_experts_inference(*split, world);
    checks.expect(res.layers == 1 && split->experts->experts() == 6 / n &&
                      split->experts->first_expert() == world->rank() * (6 / n),
                  what + ": this rank's experts kept");
    for (const int64_t count : {int64_t(7), int64_t(1)}) {
      const Tensor x = tokens(count, dtype, last_two);
      const Tensor want = serial->forward(x).output;
      const Tensor got = split->forward(x).output;
      checks.expect_close(got, want, 0, what + ", " + std::to_string(count) + " tokens");
      checks.expect(
          split->last_stats().tokens_per_expert == serial->last_stats().tokens_per_expert &&
              split->last_stats().dropped == serial->last_stats().dropped,
          what + ": the same routing and drops");
      if (kind == nn::ExpertKind::Gelu && count == 7 && !last_two)
        checks.expect(split->last_stats().dropped > 0, what + ": pairs dropped");
    }
    if (last_two)
      checks.expect(split->last_stats().tokens_per_expert[0] == 0, what + ": expert 0 idle");
  });
  checks.verify();
}

TEST(ExpertInference, SwigluExpertsOverTwoRanksEqualTheSerialLayerBitForBit) {
  check_layer(2, nn::ExpertKind::SwiGLU, DType::F64, false);
  check_layer(2, nn::ExpertKind::SwiGLU, DType::F32, false);
}

TEST(ExpertInference, GeluExpertsOverThreeRanksEqualTheSerialLayerBitForBit) {
  check_layer(3, nn::ExpertKind::Gelu, DType::F64, false);
  check_layer(3, nn::ExpertKind::Gelu, DType::F32, false);
}

TEST(ExpertInference, ARankWhoseExpertsReceiveNothingStillGathers) {
  check_layer(3, nn::ExpertKind::Gelu, DType::F64, true);
  check_layer(2, nn::ExpertKind::SwiGLU, DType::F64, true);
}

TEST(ExpertInference, BadSplitsAndUsesAreOneClearError) {
  ThreadChecks checks;
  run_thread_world(2, [&](dist::CommPtr world) {
    nn::MoE seven(config(nn::ExpertKind::SwiGLU, 7), nn::Init::none());
    checks.expect(expert_inference_error(seven, 2).find(
                      "has 7 experts, which --ep 2 ranks cannot split evenly") != std::string::npos,
                  "7 experts: the error");
    checks.expect_throw([&] { parallelize_experts_inference(seven, world); }, "cannot split evenly",
                        "7 experts");
    nn::Linear dense(3, 3);
    checks.expect_throw([&] { parallelize_experts_inference(dense, world); }, "has no MoE layer",
                        "dense");

    // A forward that records gradients is refused (the dispatch has no backward).
    auto moe = layer(nn::ExpertKind::SwiGLU, DType::F64, false);
    parallelize_experts_inference(*moe, world);
    Tensor x = tokens(7, DType::F64, false);
    x.set_requires_grad(true);
    checks.expect_throw([&] { moe->forward(x); }, "has no backward", "backward");

    // Ranks that ran different batches disagree on the routing: every rank gets the Error.
    autograd::NoGradGuard no_grad;
    checks.expect_throw(
        [&] { moe->forward(tokens(world->rank() == 0 ? 7 : 5, DType::F64, false)); },
        "every rank must run the same batch", "different batches");
  });
  checks.verify();
}

}  // namespace
}  // namespace tessel::parallel
