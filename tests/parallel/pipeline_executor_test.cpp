// SPDX-License-Identifier: Apache-2.0
// The pipeline executor on thread worlds: a chain of Linear + GELU stages cut over p ranks runs
// every generated schedule (GPipe, 1F1B, interleaved with v = 2) and gives the loss and every
// gradient of the same chain on one rank; the measured activations in flight follow each
// schedule's bound; a schedule the validator refuses never runs.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "parallel_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/nn/nn.h"
#include "tessel/ops/ops.h"
#include "tessel/parallel/pipeline/executor.h"
#include "tessel/parallel/pipeline/generators.h"
#include "tessel/parallel/pipeline/printer.h"

namespace tessel::parallel::pipeline {
namespace {

constexpr int64_t kRows = 7, kWidth = 13;

// Every rank builds all stages from the same seed, as pipeline ranks build one model; each runs
// only the stages the schedule gives it.
struct Chain {
  explicit Chain(int stages) {
    Generator g(11);
    for (int s = 0; s < stages; ++s)
      layers.push_back(
          std::make_shared<nn::Linear>(kWidth, kWidth, true, nn::Init::normal(&g, 0.4)));
  }
  Tensor stage(int s, const Tensor& x) const {
    Tensor y = ops::gelu(layers[size_t(s)]->forward(x));
    if (s + 1 == int(layers.size())) return ops::mean(ops::square(y));
    return y;
  }
  std::vector<std::shared_ptr<nn::Linear>> layers;
};

Tensor microbatch_input(int mb) {
  Generator g(uint64_t(100 + mb));
  return randn({kRows, kWidth}, DType::F32, &g);
}

class ChainRunner : public StageRunner {
 public:
  explicit ChainRunner(const Chain& chain) : chain_(chain) {}
  Tensor forward(int stage, int microbatch, const Tensor& input) override {
    ++calls;
    return chain_.stage(stage, stage == 0 ? microbatch_input(microbatch) : input);
  }
  int calls = 0;

 private:
  const Chain& chain_;
};

struct Reference {
  std::vector<double> losses;
  std::vector<std::vector<double>> weight_grads, bias_grads;  // per stage
};

// The same chain on one rank: micro-batches one after another, gradients accumulated.
Reference single_rank(int stages, int microbatches) {
  Chain chain(stages);
  Reference ref;
  for (int mb = 0; mb < microbatches; ++mb) {
    Tensor x = microbatch_input(mb);
    for (int s = 0; s < stages; ++s) x = chain.stage(s, x);
    ref.losses.push_back(x.item());
    autograd::backward(x);
  }
  for (const auto& layer : chain.layers) {
    ref.weight_grads.push_back(layer->weight.grad().to_vector<double>());
    ref.bias_grads.push_back(layer->bias.grad().to_vector<double>());
  }
  return ref;
}

void check_schedule(const Schedule& schedule) {
  const int p = schedule.ranks, m = schedule.microbatches, stages = schedule.num_stages();
  const std::string what = schedule.name + " p=" + std::to_string(p) + " m=" + std::to_string(m);
  SCOPED_TRACE(what);
  const Reference ref = single_rank(stages, m);
  test_util::Checks checks;
  test_util::run_world(p, [&](dist::CommPtr world) {
    const int r = world->rank();
    Chain chain(stages);
    ChainRunner runner(chain);
    ExecutorOptions options;
    options.activation_shapes = {Shape{kRows, kWidth}};
    options.barrier_at_start = true;
    PipelineExecutor executor(schedule, world, options);
    const ExecutionResult result = executor.run(runner);
    const std::string at = what + " rank " + std::to_string(r);
    checks.expect(runner.calls == m * schedule.virtual_stages, at + ": forward calls");
    // Both sides run the same kernels on the same [kRows, kWidth] shapes in one process, so no
    // vector width changes one side and not the other; only the order in which the m
    // micro-batches' gradients accumulate may differ (8u*sqrt(m), 1.4e-6 at m = 8, the
    // derived bound of tests/common/tolerance.h), and the losses not at all. 1e-6 and 1e-5 hold
    // with that margin; a micro-batch run twice or skipped is off by 1/m.
    if (schedule.owner(stages - 1) == r) {
      checks.expect(test_util::rel_err(result.losses, ref.losses) <= 1e-6, at + ": losses");
    } else {
      checks.expect(result.losses.empty(), at + ": losses only on the last stage's rank");
    }
    for (int s = r; s < stages; s += p) {
      const auto& layer = *chain.layers[size_t(s)];
      const std::string st = at + " stage " + std::to_string(s);
      checks.expect(test_util::rel_err(layer.weight.grad().to_vector<double>(),
                                       ref.weight_grads[size_t(s)]) <= 1e-5,
                    st + ": weight gradient");
      checks.expect(test_util::rel_err(layer.bias.grad().to_vector<double>(),
                                       ref.bias_grads[size_t(s)]) <= 1e-5,
                    st + ": bias gradient");
    }
    for (int s = 0; s < stages; ++s) {
      if (schedule.owner(s) != r)
        checks.expect(!chain.layers[size_t(s)]->weight.grad().defined(),
                      at + ": no gradient on a stage of another rank");
    }
    if (schedule.name == "1f1b") {
      checks.expect(result.peak_in_flight <= p - r && result.peak_in_flight <= m,
                    at + ": 1F1B holds at most p - r activations, measured " +
                        std::to_string(result.peak_in_flight));
    } else if (schedule.name == "gpipe") {
      checks.expect(result.peak_in_flight == m, at + ": GPipe holds all m activations, measured " +
                                                    std::to_string(result.peak_in_flight));
    }
    // The measured timeline, gathered, is a Simulation the printer draws.
    const auto timelines = gather_timelines(*world, schedule, result.timeline);
    const Simulation sim = measured_simulation(schedule, timelines);
    checks.expect(sim.peak_in_flight[size_t(r)] == result.peak_in_flight,
                  at + ": gathered peak in flight");
    checks.expect(sim.bubble_fraction >= 0 && sim.bubble_fraction < 1, at + ": bubble fraction");
    checks.expect(!text_timeline(schedule, sim, sim.makespan / 40).empty(), at + ": timeline");
    for (const TimedAction& t : result.timeline)
      checks.expect(t.start <= t.end && t.end <= result.makespan_ms, at + ": ordered times");
  });
  checks.verify();
}

TEST(PipelineExecutor, GpipeEqualsOneRank) {
  for (int p : {2, 4})
    for (int m : {1, 3, 8}) check_schedule(gpipe(p, m));
}

TEST(PipelineExecutor, OneFOneBEqualsOneRank) {
  for (int p : {2, 4})
    for (int m : {1, 3, 8}) check_schedule(one_f_one_b(p, m));
}

TEST(PipelineExecutor, InterleavedEqualsOneRank) {
  check_schedule(interleaved(2, 2, 2));
  check_schedule(interleaved(2, 8, 2));
  check_schedule(interleaved(4, 8, 2));
}

TEST(PipelineExecutor, RefusesAScheduleWithAMissingSend) {
  Schedule s = one_f_one_b(2, 3);
  auto& list = s.actions[0];
  const Action send{ActionKind::SendActivation, 1, 0, 1};
  const auto it = std::find(list.begin(), list.end(), send);
  ASSERT_NE(it, list.end());
  list.erase(it);
  ExecutorOptions options;
  options.activation_shapes = {Shape{kRows, kWidth}};
  std::string message;
  try {
    PipelineExecutor executor(s, nullptr, options);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("mb1"), std::string::npos) << message;
}

TEST(PipelineExecutor, RefusesWrongShapesAndCommunicators) {
  ExecutorOptions options;
  options.activation_shapes = {Shape{kRows, kWidth}, Shape{kRows, kWidth}};
  EXPECT_THROW(PipelineExecutor(one_f_one_b(2, 3), nullptr, options), Error);
  options.activation_shapes = {Shape{kRows, kWidth}};
  EXPECT_THROW(PipelineExecutor(one_f_one_b(2, 3), nullptr, options), Error);
}

}  // namespace
}  // namespace tessel::parallel::pipeline
