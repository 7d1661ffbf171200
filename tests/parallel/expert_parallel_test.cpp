// SPDX-License-Identifier: Apache-2.0
// Expert parallelism on in-process thread worlds: the differentiable row exchange, and MoE layers
// split over 2 and 4 ranks against the serial layer run on each rank's own tokens (odd counts, so
// the ranks exchange uneven blocks): outputs, routing and drops, the input's and router's
// gradients, and each rank's expert gradients equal to the sum of every rank's serial gradients
// for those experts (f64, 1e-12). A rank whose experts receive no row still takes part in every
// exchange. Bad splits are one clear Error.
#include "tessel/parallel/expert/expert_parallel.h"

#include <gtest/gtest.h>

#include "common/thread_checks.h"
#include "moe_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/nn/moe.h"
#include "tessel/ops/ops.h"

namespace tessel::parallel {
namespace {

using tessel::test::run_thread_world;
using tessel::test::ThreadChecks;
using test_util::expect_same_moe_step;
using test_util::grad_or_zeros;
using test_util::moe_objective;
using test_util::moe_tokens;

nn::MoEConfig config(nn::ExpertKind kind) {
  nn::MoEConfig c;
  c.hidden = 6;
  c.ffn_hidden = 5;
  c.num_experts = 4;
  c.top_k = 2;
  c.expert = kind;
  c.gate_form = nn::GateForm::Switch;
  c.capacity_factor = 1.0;  // drops pairs
  c.z_loss_coef = 0.01;
  return c;
}

std::shared_ptr<nn::MoE> layer(nn::ExpertKind kind, bool route_to_first_two) {
  Generator g(11);
  auto moe = std::make_shared<nn::MoE>(config(kind), nn::Init::normal(&g, 0.5, DType::F64));
  if (route_to_first_two) {
    // Positive tokens, positive rows for experts 0 and 1, zero rows for 2 and 3: every token's
    // two choices are experts 0 and 1.
    Tensor w = moe->router->weight;
    std::vector<double> v = w.to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = i < 12 ? 0.1 + 0.01 * double(i) : 0.0;
    w.copy_from(from_data(v, w.shape()));
  }
  return moe;
}

void check_layer(int n, nn::ExpertKind kind, bool route_to_first_two) {
  const std::vector<int64_t> counts = {13, 7, 5, 9};
  ThreadChecks checks;
  run_thread_world(n, [&](dist::CommPtr world) {
    const int r = world->rank();
    const std::string what = "rank " + std::to_string(r) + " of " + std::to_string(n);
    // The serial layer on this rank's tokens.
    auto serial = layer(kind, route_to_first_two);
    Tensor xs = moe_tokens(r, counts[size_t(r)], 6, route_to_first_two);
    const nn::MoE::Output want = serial->forward(xs);
    autograd::backward(moe_objective(want));
    // The split layer on the same tokens.
    auto split = layer(kind, route_to_first_two);
    const ExpertParallelResult res = parallelize_experts(*split, world);
    checks.expect(res.layers == 1 && res.params.size() == split->experts->named_parameters().size(),
                  what + ": one layer split");
    Tensor xp = moe_tokens(r, counts[size_t(r)], 6, route_to_first_two);
    const nn::MoE::Output got = split->forward(xp);
    autograd::backward(moe_objective(got));

    expect_same_moe_step(checks, *split, got, xp, *serial, want, xs, what);
    // Each rank's experts: the sum over ranks of the serial gradients of those rows.
    const int64_t local = 4 / n;
    for (const auto& [name, p] : serial->experts->named_parameters()) {
      Tensor total = grad_or_zeros(p).clone();
      world->all_reduce(total);
      Tensor mine = total.narrow(0, r * local, local).clone();
      for (const auto& [name2, q] : split->experts->named_parameters())
        if (name2 == name) checks.expect_close(grad_or_zeros(q), mine, 1e-12, what + ": " + name);
    }
    if (route_to_first_two)
      checks.expect(split->last_stats().tokens_per_expert[2] == 0, what + ": expert 2 idle");
  });
  checks.verify();
}

TEST(ExpertParallel, GeluExpertsOverTwoRanksEqualTheSerialLayer) {
  check_layer(2, nn::ExpertKind::Gelu, false);
}

TEST(ExpertParallel, SwigluExpertsOverFourRanksEqualTheSerialLayer) {
  check_layer(4, nn::ExpertKind::SwiGLU, false);
}

TEST(ExpertParallel, ARankWhoseExpertsReceiveNothingStillExchanges) {
  check_layer(2, nn::ExpertKind::Gelu, true);
}

TEST(ExpertParallel, RowExchangeAndItsGradient) {
  ThreadChecks checks;
  run_thread_world(3, [&](dist::CommPtr world) {
    const int r = world->rank();
    // Rank r sends s + r + 1 rows to rank s; row values name (source, destination, index).
    std::vector<int64_t> send(3), recv(3);
    std::vector<double> v;
    for (int s = 0; s < 3; ++s) {
      send[size_t(s)] = s + r + 1;
      recv[size_t(s)] = r + s + 1;
      for (int i = 0; i < s + r + 1; ++i)
        for (int c = 0; c < 2; ++c) v.push_back(100.0 * r + 10.0 * s + i + 0.5 * c);
    }
    Tensor x = from_data(v, Shape{int64_t(v.size() / 2), 2});
    x.set_requires_grad(true);
    Tensor y = all_to_all_rows(x, send, recv, *world);
    std::vector<double> want;
    for (int s = 0; s < 3; ++s)
      for (int i = 0; i < r + s + 1; ++i)
        for (int c = 0; c < 2; ++c) want.push_back(100.0 * s + 10.0 * r + i + 0.5 * c);
    checks.expect_close(y, want, Shape{int64_t(want.size() / 2), 2}, 0,
                        "rank " + std::to_string(r));
    // d(sum(y * y))/dx = 2x: each row's gradient comes back to where the row started.
    autograd::backward(ops::sum(ops::mul(y, y)));
    checks.expect_close(x.grad(), ops::mul(x.detach(), 2.0), 0, "gradient");
    checks.expect_throw(
        [&] {
          all_to_all_rows(x, {1, 1, 1}, recv, *world);
        },
        "add up to 3 rows", "bad counts");
  });
  checks.verify();
}

TEST(ExpertParallel, ExpertsNotDivisibleByEpAreOneClearError) {
  nn::MoEConfig c = config(nn::ExpertKind::Gelu);
  c.num_experts = 3;
  EXPECT_EQ(expert_parallel_error(config(nn::ExpertKind::Gelu), 2, "h.1.moe"), "");
  const std::string e = expert_parallel_error(c, 2, "h.1.moe");
  EXPECT_NE(e.find("'h.1.moe' has 3 experts, which --ep 2 ranks cannot split evenly"),
            std::string::npos)
      << e;
  ThreadChecks checks;
  run_thread_world(2, [&](dist::CommPtr world) {
    nn::MoE moe(c, nn::Init::none());
    checks.expect_throw([&] { parallelize_experts(moe, world); }, "cannot split evenly", "E=3");
    nn::Linear dense(3, 3);
    checks.expect_throw([&] { parallelize_experts(dense, world); }, "has no MoE layer", "dense");
  });
  checks.verify();
}

}  // namespace
}  // namespace tessel::parallel
