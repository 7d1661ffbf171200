// SPDX-License-Identifier: Apache-2.0
// Expert tensor parallelism on in-process thread worlds: MoE layers whose experts' FFN columns
// are split over 2 and 3 tp ranks (5 columns: uneven pieces 3 + 2 and 2 + 2 + 1), alone and
// composed with expert parallelism (tp 2 x ep 2), against the serial layer on the same tokens
// (a tp group's ranks see the same tokens): outputs, routing and drops, the auxiliary loss, the
// input's, router's and output bias's gradients whole, and each rank's expert gradients equal to
// its piece (experts' rows, FFN columns) of the serial gradients summed over the ep ranks (f64,
// 1e-12); with ep, the exchanged rows split over tp (each kept row's bytes sent once per tp
// group, tp 2 and 3), also with whole experts (bitwise each tp rank sending its own copy). Bad
// splits are one clear Error.
#include "tessel/parallel/expert/expert_tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/thread_checks.h"
#include "moe_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/dist/record.h"
#include "tessel/nn/moe.h"
#include "tessel/ops/ops.h"
#include "tessel/parallel/expert/expert_parallel.h"

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
  c.gate_form = kind == nn::ExpertKind::SwiGLU ? nn::GateForm::Mixtral : nn::GateForm::Switch;
  c.capacity_factor = 1.0;  // drops pairs
  c.z_loss_coef = 0.01;
  return c;
}

std::shared_ptr<nn::MoE> layer(nn::ExpertKind kind) {
  Generator g(11);
  auto moe = std::make_shared<nn::MoE>(config(kind), nn::Init::normal(&g, 0.5, DType::F64));
  if (kind == nn::ExpertKind::Gelu) {  // non-zero biases, so that adding one twice shows
    for (Tensor* b : {&moe->experts->fc_bias, &moe->experts->proj_bias}) {
      std::vector<double> v(size_t(b->numel()));
      for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1 * std::cos(double(i));
      b->copy_from(from_data(v, b->shape()));
    }
  }
  return moe;
}

// tp x ep ranks (tp fastest, as the trainer's mesh): the tp group of a rank holds its ep rank's
// tokens; the serial layer runs them too.
void check_layer(int tp_size, int ep_size, nn::ExpertKind kind) {
  const std::vector<int64_t> counts = {13, 7};
  ThreadChecks checks;
  run_thread_world(tp_size * ep_size, [&](dist::CommPtr world) {
    const int r = world->rank(), tp_rank = r % tp_size, ep_rank = r / tp_size;
    const std::string what = "rank " + std::to_string(r) + " (tp " + std::to_string(tp_size) +
                             " x ep " + std::to_string(ep_size) + ")";
    dist::CommPtr tp = world->split(ep_rank, tp_rank, "tp");
    dist::CommPtr ep = world->split(tp_rank, ep_rank, "ep");
    auto serial = layer(kind);
    Tensor xs = moe_tokens(ep_rank, counts[size_t(ep_rank)], 6);
    const nn::MoE::Output want = serial->forward(xs);
    autograd::backward(moe_objective(want));

    auto split = layer(kind);
    const ExpertTensorParallelResult res = parallelize_expert_ffn(*split, tp);
    if (ep_size > 1) {
      parallelize_experts(*split, ep);
      split_expert_rows_over_tp(*split, tp);
    }
    const size_t pieces = 3;  // the three weights (SwiGLU), or two and fc_bias (GELU)
    checks.expect(res.layers == 1 && res.sharded.size() == pieces, what + ": one layer split");
    Tensor xp = moe_tokens(ep_rank, counts[size_t(ep_rank)], 6);
    const uint64_t issued_before = ep->context().issued_count();
    const nn::MoE::Output got = split->forward(xp);
    autograd::backward(moe_objective(got));
    if (ep_size > 1) {
      // The rows' all-to-all elements over every rank: each kept row once in a dispatch and once
      // in a combine, forward and backward, sent by one rank of its tp group (not by each).
      double sent = 0, kept = 0;
      for (const dist::Record& rec :
           ep->context().recent(ep->context().issued_count() - issued_before))
        if (rec.label_str() == ep->label() && rec.kind == dist::OpKind::AllToAllV)
          sent += double(rec.shape.numel());
      for (int64_t n : serial->last_stats().tokens_per_expert) kept += double(n);
      Tensor both = from_data(std::vector<double>{sent, kept / tp_size}, Shape{2});
      world->all_reduce(both);
      const std::vector<double> sums = both.to_vector<double>();
      checks.expect(sums[0] == 4 * 6 * sums[1],
                    what + ": the exchanges moved " + std::to_string(sums[0]) +
                        " elements over all ranks, expected 4 x 6 x " + std::to_string(sums[1]) +
                        " kept rows (each row sent by one tp rank)");
    }

    expect_same_moe_step(checks, *split, got, xp, *serial, want, xs, what);
    // Each rank's piece: rows of its experts, summed over the ep ranks' tokens, then its columns.
    const int64_t local = 4 / ep_size;
    for (const auto& [name, p] : serial->experts->named_parameters()) {
      Tensor total = grad_or_zeros(p).clone();
      ep->all_reduce(total);
      Tensor mine = total.narrow(0, ep_rank * local, local).clone();
      for (const auto& [spec_name, spec] : res.sharded)
        if (spec_name == "experts." + name)
          mine = sharding::shard_tensor(mine, spec, tp_size, tp_rank);
      for (const auto& [name2, q] : split->experts->named_parameters())
        if (name2 == name) checks.expect_close(grad_or_zeros(q), mine, 1e-12, what + ": " + name);
    }
  });
  checks.verify();
}

TEST(ExpertTensorParallel, GeluExpertsOverTwoTpRanksEqualTheSerialLayer) {
  check_layer(2, 1, nn::ExpertKind::Gelu);
}

TEST(ExpertTensorParallel, SwigluExpertsOverThreeTpRanksEqualTheSerialLayer) {
  check_layer(3, 1, nn::ExpertKind::SwiGLU);
}

TEST(ExpertTensorParallel, ComposedWithExpertParallelism) {
  check_layer(2, 2, nn::ExpertKind::Gelu);
  check_layer(2, 2, nn::ExpertKind::SwiGLU);
}

TEST(ExpertTensorParallel, ThreeTpRanksSplitTheExchangedRowsUnevenly) {
  check_layer(3, 2, nn::ExpertKind::SwiGLU);
}

// Whole experts on every tp rank (ep with tp, no --etp): each tp rank sends its piece of the
// rows and the pair gathers them, which gives bit for bit what every tp rank sending its own copy
// gives (outputs, the input's, router's and every expert's gradients), for 1 / tp of the
// elements (tp 2 and 3 over ep 2: uneven pieces).
void check_whole_experts_rows_split(int tp_size, nn::ExpertKind kind) {
  const int ep_size = 2;
  ThreadChecks checks;
  run_thread_world(tp_size * ep_size, [&](dist::CommPtr world) {
    const int r = world->rank(), tp_rank = r % tp_size, ep_rank = r / tp_size;
    const std::string what =
        "rank " + std::to_string(r) + " (whole experts, tp " + std::to_string(tp_size) + " x ep 2)";
    dist::CommPtr tp = world->split(ep_rank, tp_rank, "tp");
    dist::CommPtr ep = world->split(tp_rank, ep_rank, "ep");
    const int64_t count = ep_rank == 0 ? 13 : 7;
    const auto step = [&](bool split_rows, double& sent) {
      auto moe = layer(kind);
      parallelize_experts(*moe, ep);
      if (split_rows) split_expert_rows_over_tp(*moe, tp);
      Tensor x = moe_tokens(ep_rank, count, 6);
      const uint64_t before = ep->context().issued_count();
      const nn::MoE::Output out = moe->forward(x);
      autograd::backward(moe_objective(out));
      sent = 0;
      for (const dist::Record& rec : ep->context().recent(ep->context().issued_count() - before))
        if (rec.label_str() == ep->label() && rec.kind == dist::OpKind::AllToAllV)
          sent += double(rec.shape.numel());
      std::vector<std::vector<double>> values = {out.output.to_vector<double>(),
                                                 x.grad().to_vector<double>()};
      for (const auto& [name, p] : moe->named_parameters())
        values.push_back(grad_or_zeros(p).to_vector<double>());
      return values;
    };
    double copies = 0, pieces = 0;
    const auto want = step(false, copies);
    const auto got = step(true, pieces);
    checks.expect(got == want, what + ": the split exchange changed a value");
    Tensor both = from_data(std::vector<double>{copies, pieces}, Shape{2});
    world->all_reduce(both);
    const std::vector<double> sums = both.to_vector<double>();
    checks.expect(sums[0] > 0 && sums[0] == tp_size * sums[1],
                  what + ": the exchanges moved " + std::to_string(sums[1]) +
                      " elements over all ranks, every tp rank its own copy " +
                      std::to_string(sums[0]));
  });
  checks.verify();
}

TEST(ExpertTensorParallel, WholeExpertsSplitTheExchangedRowsBitwise) {
  check_whole_experts_rows_split(2, nn::ExpertKind::Gelu);
  check_whole_experts_rows_split(3, nn::ExpertKind::SwiGLU);
}

TEST(ExpertTensorParallel, BadSplitsAreOneClearError) {
  ThreadChecks checks;
  run_thread_world(2, [&](dist::CommPtr world) {
    nn::MoEConfig c = config(nn::ExpertKind::Gelu);
    c.ffn_hidden = 1;
    nn::MoE narrow(c, nn::Init::none());
    checks.expect_throw([&] { parallelize_expert_ffn(narrow, world); },
                        "experts of width 1, which --tp 2 ranks cannot split", "width 1");
    nn::Linear dense(3, 3);
    checks.expect_throw([&] { parallelize_expert_ffn(dense, world); },
                        "has no mixture-of-experts layer", "dense");
  });
  checks.verify();
}

}  // namespace
}  // namespace tessel::parallel
