// SPDX-License-Identifier: Apache-2.0
// ZeRO-2/3's full gradient buffers are freed at points the program fixes: a reduce-scatter is
// retired (waited for, its buffer freed) when DataParallelOptions::max_pending_reductions later
// buckets have been launched, or at finish. So the gradient bytes held at every grad-ready hook
// are the same on every rank and in every run, whichever rank is slow; before, a buffer was freed
// when a hook's test() happened to find its reduction complete, and a step's peak moved by a whole
// buffer from run to run. The averages are the same bits whatever the bound.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "parallel_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/autograd/meta.h"
#include "tessel/nn/nn.h"
#include "tessel/ops/ops.h"
#include "tessel/parallel/data/data_parallel.h"

namespace tessel::parallel {
namespace {

using namespace test_util;

constexpr int64_t kIn = 13, kHidden = 33, kClasses = 7, kRows = 7;

// Three linears in a chain: with a one-byte bucket budget every parameter is a bucket of its own,
// six reductions launched one by one during backward.
class Chain : public nn::Module {
 public:
  Chain() : Module("Chain") {
    Generator g(5);
    fc1 = register_module(
        "fc1", std::make_shared<nn::Linear>(kIn, kHidden, true, nn::Init::normal(&g, 0.3)));
    fc2 = register_module(
        "fc2", std::make_shared<nn::Linear>(kHidden, kHidden, true, nn::Init::normal(&g, 0.3)));
    fc3 = register_module(
        "fc3", std::make_shared<nn::Linear>(kHidden, kClasses, true, nn::Init::normal(&g, 0.3)));
  }
  Tensor loss(int rank) {
    Generator g(uint64_t(100 + rank));
    Tensor x = randn({kRows, kIn}, DType::F32, &g);
    std::vector<int64_t> t;
    for (int64_t i = 0; i < kRows; ++i) t.push_back((i * 3 + rank) % kClasses);
    Tensor y = fc3->forward(ops::tanh(fc2->forward(ops::tanh(fc1->forward(x)))));
    return ops::cross_entropy(y, from_data(t, {kRows}));
  }
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

struct RankRun {
  std::vector<int64_t> held;  // gradient_bytes() after each grad-ready hook
  std::vector<float> shards;  // every bucket's averaged block, concatenated
};

// Two steps on a world of 2 where rank `slow` sleeps in every hook, so that the other rank's
// hooks run long before its reductions can complete.
std::vector<RankRun> run_with_slow_rank(int slow, int64_t max_pending) {
  std::vector<RankRun> runs(2);
  run_world(2, [&](dist::CommPtr comm) {
    Chain m;
    DataParallel dp(m.named_parameters(), comm,
                    {.bucket_bytes = 1,
                     .reduction = GradReduction::ReduceScatter,
                     .max_pending_reductions = max_pending});
    RankRun& run = runs[size_t(comm->rank())];
    std::vector<int64_t> hooks;
    for (const Tensor& p : m.parameters()) {
      hooks.push_back(
          autograd::register_grad_ready_hook(p, [&, rank = comm->rank()](const Tensor&) {
            if (rank == slow) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            run.held.push_back(dp.gradient_bytes());
          }));
    }
    for (int step = 0; step < 2; ++step) {
      m.zero_grad();
      autograd::backward(m.loss(comm->rank()));
      dp.finish_gradient_sync();
    }
    for (int64_t b = 0; b < dp.bucket_count(); ++b) {
      const std::vector<float> s = dp.gradient_shard(b).to_vector<float>();
      run.shards.insert(run.shards.end(), s.begin(), s.end());
    }
    const std::vector<Tensor> params = m.parameters();
    for (size_t i = 0; i < params.size(); ++i)
      autograd::remove_grad_ready_hook(params[i], hooks[i]);
  });
  return runs;
}

TEST(ReduceScatterRetire, HeldBytesAtEveryHookDoNotDependOnWhichRankIsSlow) {
  std::vector<int64_t> one_pending;
  for (int64_t max_pending : {1, 2}) {
    const std::vector<RankRun> a = run_with_slow_rank(1, max_pending);
    const std::vector<RankRun> b = run_with_slow_rank(0, max_pending);
    ASSERT_EQ(a[0].held.size(), 12u) << "six parameters, two steps";
    for (const std::vector<RankRun>* runs : {&a, &b}) {
      for (const RankRun& r : *runs) EXPECT_EQ(r.held, a[0].held) << "bound " << max_pending;
    }
    // The bound's own figure: after each launch at most max_pending buffers of launched buckets
    // remain, so a larger bound holds at least as much at every hook.
    if (max_pending == 1) {
      one_pending = a[0].held;
    } else {
      for (size_t i = 0; i < one_pending.size(); ++i) EXPECT_GE(a[0].held[i], one_pending[i]);
      EXPECT_NE(a[0].held, one_pending) << "a second pending reduction holds one more buffer";
    }
    // Waiting earlier or later changes nothing in the averages.
    for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(a[size_t(rank)].shards, b[size_t(rank)].shards);
  }
}

TEST(ReduceScatterRetire, RefusesABoundBelowOne) {
  run_world(1, [&](dist::CommPtr comm) {
    Chain m;
    try {
      DataParallel dp(m.named_parameters(), comm,
                      {.reduction = GradReduction::ReduceScatter, .max_pending_reductions = 0});
      ADD_FAILURE() << "a bound of 0 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("max_pending_reductions must be >= 1, got 0"),
                std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace tessel::parallel
