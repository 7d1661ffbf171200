// SPDX-License-Identifier: Apache-2.0
// GPT-2 under tensor and sequence parallelism on thread worlds of 2 and 4 ranks, against one
// process: logits, loss (and the chunked evaluation loss), gathered gradients and the gradient norm
// (relative error <= 1e-5), greedy generation ids, per-rank parameter bytes, the shipped plan file
// equal to the built-in one, and refusals (heads not divisible by tp, bad plans). A vocabulary of
// 37 is padded on both sizes and a sequence of 13 splits unevenly.
#include "tessel/train/model_tensor_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "common/tolerance.h"
#include "parallel/parallel_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/models/generation.h"
#include "tessel/train/optim/grad_clip.h"
#include "tessel/train/optim/grad_norm.h"
#include "tessel/train/strategy/tensor_parallel_strategy.h"

namespace tessel::train {
namespace {

using parallel::test_util::Checks;
using parallel::test_util::rel_err;
using parallel::test_util::run_world;
using parallel::test_util::TinyGpt2Case;

// Sharded sums in another order than one process: the longest reordered reduction is the MLP's
// 4 x 16 hidden units, through 2 layers plus embedding and head (tests/common/tolerance.h):
// about 7.6e-6; a wrong shard or a missing all-reduce is off by O(1).
const double kTol = test::reorder_tolerance(DType::F32, 64, 4);

struct Reference {
  std::vector<double> logits;
  double loss = 0, grad_sq = 0;
  std::map<std::string, std::vector<double>> grads;
  std::vector<int64_t> generated;
};

models::GenerationOptions greedy(int64_t n) {
  models::GenerationOptions g;
  g.max_new_tokens = n;
  g.sampling.temperature = 0;
  return g;
}

const std::vector<int64_t> kPrompt = {3, 14, 15, 9, 2};

Reference reference(const TinyGpt2Case& c) {
  auto m = c.model();
  Reference r;
  {
    autograd::NoGradGuard no_grad;
    r.logits = m->forward(c.ids).to_vector<double>();
  }
  Tensor loss = m->loss(c.ids, c.targets);
  r.loss = loss.item();
  autograd::backward(loss);
  for (const auto& [name, p] : m->named_parameters()) r.grads[name] = p.grad().to_vector<double>();
  r.grad_sq = grad_square_sum(m->parameters());
  r.generated = models::generate(*m, kPrompt, greedy(6)).tokens;
  return r;
}

struct Case {
  int tp;
  bool sp;
};

class Gpt2TpWorld : public ::testing::TestWithParam<Case> {};

TEST_P(Gpt2TpWorld, EqualsOneProcess) {
  const auto [n, sp] = GetParam();
  TinyGpt2Case c(3);
  c.config.n_head = 4;
  const Reference want = reference(c);
  Checks checks;
  run_world(n, [&](dist::CommPtr tp) {
    const std::string at =
        "tp " + std::to_string(n) + (sp ? " sp" : "") + " rank " + std::to_string(tp->rank());
    auto m = c.model();
    int64_t full_sharded = 0;
    std::vector<std::string> notes;
    const auto info =
        parallelize_model(*m, tp, "", sp, [&](const std::string& s) { notes.push_back(s); });
    checks.expect(
        notes.size() == 1 &&
            notes[0].find("37 padded to " + std::to_string(n == 2 ? 38 : 40)) != std::string::npos,
        at + ": padding note");
    // Bytes: every sharded parameter holds about 1/tp of its full size.
    auto full_model = c.model();
    int64_t local_sharded = 0;
    for (const auto& [name, p] : m->named_parameters()) {
      if (info.result.spec(name) == nullptr) continue;
      local_sharded += int64_t(p.nbytes());
      full_sharded += int64_t(full_model->find(name).nbytes());
    }
    const double share = double(local_sharded) * n / double(full_sharded);
    checks.expect(share > 0.95 && share < 1.1,
                  at + ": sharded bytes x tp / full = " + std::to_string(share));

    {
      autograd::NoGradGuard no_grad;
      Tensor logits = model_tp_full_logits(info, m->forward(c.ids));
      const double e = rel_err(logits.to_vector<double>(), want.logits);
      checks.expect(e <= kTol, at + ": logits relative error " + std::to_string(e));
      // Evaluation in chunks of 5 positions (5, 5, 3): each chunk's vocab-parallel mean weighted
      // by its tokens, the one-process loss to within the same reordering. Under sp the ranks'
      // pieces of the sequence are gathered before the head, which then sees at most 5
      // positions at a time (the whole [B, 13, V/tp] logits never exist), and the value is the
      // whole-sequence tp loss to within f32 rounding of the chunks' means.
      int64_t widest = 0, chunks = 0;
      const int64_t seen =
          m->add_activation_observer([&](const std::string& name, const Tensor& t) {
            if (name != "logits") return;
            widest = std::max(widest, t.size(1));
            ++chunks;
          });
      const double ev = model_tp_eval_loss(*m, info, c.ids, c.targets, 5).item();
      m->remove_hook(seen);
      checks.expect(widest == 5 && chunks == 3, at + ": eval head chunks " +
                                                    std::to_string(chunks) + ", widest " +
                                                    std::to_string(widest) + " positions");
      const double ee = std::abs(ev - want.loss) / std::abs(want.loss);
      checks.expect(ee <= kTol, at + ": chunked eval loss relative error " + std::to_string(ee));
      const double whole = model_tp_loss(*m, info, c.ids, c.targets).item();
      const double ew = std::abs(ev - whole) / std::abs(whole);
      // Three f32 means of up to 5 x B tokens each, weighted in double: a few f32 ulps.
      checks.expect(
          ew <= 8 * 1.2e-7,
          at + ": chunked eval loss vs the whole-sequence tp loss: relative " + std::to_string(ew));
      // Evaluation leaves sequence parallelism as it found it: the next forward splits again.
      checks.expect(!sp || info.result.sequence->active, at + ": sp left paused");
    }
    Tensor loss = model_tp_loss(*m, info, c.ids, c.targets);
    const double el = std::abs(loss.item() - want.loss) / std::abs(want.loss);
    checks.expect(el <= kTol, at + ": loss relative error " + std::to_string(el));
    autograd::backward(loss);
    model_tp_reduce_gradients(*m, info);
    nn::NamedTensors grads;
    for (const auto& [name, p] : m->named_parameters()) grads.emplace_back(name, p.grad());
    for (const auto& [name, g] : model_tp_gather(info, grads)) {
      const double e = rel_err(g.to_vector<double>(), want.grads.at(name));
      checks.expect(e <= kTol,
                    at + ": gradient of " + name + " relative error " + std::to_string(e));
    }
    // The trainer's norm over tp, as the tensor-parallel axis describes it: pieces add over tp,
    // whole parameters count at tp rank 0, second copies of replicated pieces not at all.
    GradNormPlan plan;
    for (const auto& [name, p] : m->named_parameters())
      plan.spans.push_back(whole_span(p.grad(), 0, name));
    describe_tensor_parallel_norm(info, plan);
    const double gs = global_square_sum(plan.spans, plan.groups, plan.norm_axes()).total;
    checks.expect(
        std::abs(gs - want.grad_sq) <= kTol * want.grad_sq,
        at + ": grad square sum " + std::to_string(gs) + " vs " + std::to_string(want.grad_sq));
    // Gathered weights equal the full model's.
    auto gathered = model_tp_gather_model(*m, info);
    for (const auto& [name, p] : full_model->named_parameters()) {
      const double e = rel_err(gathered->find(name).to_vector<double>(), p.to_vector<double>());
      checks.expect(e == 0, at + ": gathered " + name + " differs");
    }
    {
      const SequenceParallelPause pause(info);
      models::GenerationOptions g = greedy(6);
      g.full_logits = [&](const Tensor& local) { return model_tp_full_logits(info, local); };
      checks.expect(models::generate(*m, kPrompt, g).tokens == want.generated,
                    at + ": greedy ids differ");
    }
  });
  checks.verify();
}

INSTANTIATE_TEST_SUITE_P(Worlds, Gpt2TpWorld,
                         ::testing::Values(Case{2, false}, Case{2, true}, Case{4, false},
                                           Case{4, true}),
                         [](const auto& info) {
                           return "tp" + std::to_string(info.param.tp) +
                                  (info.param.sp ? "_sp" : "");
                         });

TEST(Gpt2TensorParallelPlan, RefusesHeadsNotDivisible) {
  TinyGpt2Case c(1);
  c.config.n_head = 4;
  Checks checks;
  run_world(3, [&](dist::CommPtr tp) {
    auto m = c.model();
    checks.expect_throw([&] { parallelize_model(*m, tp, "", false); },
                        "n_head = 4 is not divisible by tp = 3", "heads");
  });
  checks.verify();
}

// Without the region entry before the tied head the input's gradient is one rank's partial sum:
// training runs and is wrong (1e-4 off by step 2), so the plan is refused before any change.
TEST(Gpt2TensorParallelPlan, RefusesATiedHeadWithoutRegionEntry) {
  TinyGpt2Case c(1);
  c.config.n_head = 4;
  const std::string plan = test::scratch_path("tessel_tp_no_entry").string() + "/plan.json";
  auto json = nlohmann::ordered_json::parse(c.config.tensor_parallel(2).plan_json);
  json["ln_f"] = "Sequence";
  std::ofstream(plan) << json.dump(2);
  Checks checks;
  run_world(2, [&](dist::CommPtr tp) {
    auto m = c.model();
    checks.expect_throw([&] { parallelize_model(*m, tp, plan, false); },
                        "its input must enter the tensor-parallel region at 'ln_f'", "entry");
    checks.expect_throw([&] { parallelize_model(*m, tp, plan, false); },
                        "rule 'ln_f' is Sequence without gather_output", "rule");
  });
  checks.verify();
}

TEST(Gpt2TensorParallelPlan, ShippedPlanIsTheBuiltIn) {
  const auto shipped =
      parallel::ParallelPlan::load(std::string(TESSEL_SOURCE_DIR) + "/configs/gpt2-tp.json");
  const auto built_in =
      parallel::ParallelPlan::parse(models::GPT2Config().tensor_parallel(1).plan_json, "built-in");
  ASSERT_EQ(shipped.rules.size(), built_in.rules.size());
  for (size_t i = 0; i < shipped.rules.size(); ++i) {
    EXPECT_EQ(shipped.rules[i].pattern, built_in.rules[i].pattern);
    EXPECT_EQ(shipped.rules[i].style, built_in.rules[i].style);
    EXPECT_EQ(shipped.rules[i].blocks, built_in.rules[i].blocks);
    EXPECT_EQ(shipped.rules[i].unit, built_in.rules[i].unit);
    EXPECT_EQ(shipped.rules[i].gather_output, built_in.rules[i].gather_output);
  }
}

}  // namespace
}  // namespace tessel::train
