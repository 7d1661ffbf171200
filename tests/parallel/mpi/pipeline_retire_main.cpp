// SPDX-License-Identifier: Apache-2.0
// The pipeline executor retires a send (waits for it, frees its payload) after the first compute
// that follows it in the rank's list, so the bytes a rank holds after every action are fixed by
// the schedule, whichever rank is slow. Before, a payload was freed when a test() after a compute
// happened to find its send complete, which depends on the receiver's progress: the last stage's
// peak moved by one input gradient from run to run (docs/PLANNER.md, "Memory model").
//
// Launched by CTest as `mpirun -np 2`: MPI is the transport whose sends complete only once the
// receiver has taken them (a thread world's and TCP's sends are buffered, complete when issued).
// A chain of Linear + GELU stages with messages of 33 x 1031 floats (136 KB, well past the
// shared-memory eager limit) runs GPipe, 1F1B and interleaved 1F1B twice per schedule, once with
// rank 0 sleeping in every forward and once with rank 1; every rank's allocator bytes after each
// action must be the same in both runs, and so must the losses and every gradient, bit for bit.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tessel/dist/world.h"
#include "tessel/nn/nn.h"
#include "tessel/ops/ops.h"
#include "tessel/parallel/pipeline/executor.h"
#include "tessel/parallel/pipeline/generators.h"
#include "tessel/tensor/allocator.h"

using namespace tessel;
using namespace tessel::parallel::pipeline;

namespace {

constexpr int64_t kRows = 33, kWidth = 1031;

struct Chain {
  explicit Chain(int stages) {
    Generator g(11);
    for (int s = 0; s < stages; ++s)
      layers.push_back(
          std::make_shared<nn::Linear>(kWidth, kWidth, true, nn::Init::normal(&g, 1.0 / 32)));
  }
  std::vector<std::shared_ptr<nn::Linear>> layers;
};

class SlowRunner : public StageRunner {
 public:
  SlowRunner(const Chain& chain, bool slow) : chain_(chain), slow_(slow) {}
  Tensor forward(int stage, int microbatch, const Tensor& input) override {
    if (slow_) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    Tensor x = input;
    if (stage == 0) {
      Generator g(uint64_t(100 + microbatch));
      x = randn({kRows, kWidth}, DType::F32, &g);
    }
    Tensor y = ops::gelu(chain_.layers[size_t(stage)]->forward(x));
    return stage + 1 == int(chain_.layers.size()) ? ops::mean(ops::square(y)) : y;
  }

 private:
  const Chain& chain_;
  bool slow_;
};

struct Run {
  std::vector<int64_t> held;  // allocator bytes in use after each action
  std::vector<double> losses;
  std::vector<float> grads;  // this rank's stages' weight and bias gradients
};

Run run_once(const Schedule& schedule, const dist::CommPtr& world, int slow) {
  Chain chain(schedule.num_stages());
  SlowRunner runner(chain, world->rank() == slow);
  Run out;
  ExecutorOptions options;
  options.activation_shapes = {Shape{kRows, kWidth}};
  options.barrier_at_start = true;
  options.after_action = [&](int) { out.held.push_back(int64_t(cpu_allocator().bytes_in_use())); };
  PipelineExecutor executor(schedule, world, options);
  out.losses = executor.run(runner).losses;
  for (int s = world->rank(); s < schedule.num_stages(); s += schedule.ranks) {
    for (const Tensor* t : {&chain.layers[size_t(s)]->weight, &chain.layers[size_t(s)]->bias}) {
      const std::vector<float> g = t->grad().to_vector<float>();
      out.grads.insert(out.grads.end(), g.begin(), g.end());
    }
  }
  world->barrier();
  return out;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

}  // namespace

int main() {
  try {
    dist::CommPtr world = dist::init_world();
    if (world->size() != 2) {
      std::fprintf(stderr, "pipeline_retire: needs 2 ranks, got %d\n", world->size());
      return 1;
    }
    const int rank = world->rank();
    int failures = 0;
    for (const Schedule& schedule : {one_f_one_b(2, 4), gpipe(2, 4), interleaved(2, 4, 2)}) {
      const Run a = run_once(schedule, world, 0);
      const Run b = run_once(schedule, world, 1);
      const std::string what = schedule.name + " rank " + std::to_string(rank);
      if (a.held != b.held) {
        ++failures;
        std::fprintf(stderr,
                     "FAIL %s: bytes held after each action depend on which rank is slow:\n"
                     "  rank 0 slow: %s\n  rank 1 slow: %s\n",
                     what.c_str(), join(a.held).c_str(), join(b.held).c_str());
      }
      if (a.losses != b.losses || a.grads != b.grads) {
        ++failures;
        std::fprintf(stderr, "FAIL %s: losses or gradients differ between the runs\n",
                     what.c_str());
      }
      if (a.held.size() != schedule.actions[size_t(rank)].size()) {
        ++failures;
        std::fprintf(stderr, "FAIL %s: %zu bytes recorded for %zu actions\n", what.c_str(),
                     a.held.size(), schedule.actions[size_t(rank)].size());
      }
      std::printf("%s: %zu actions, bytes after each equal whichever rank is slow: %s\n",
                  what.c_str(), a.held.size(), a.held == b.held ? "yes" : "no");
    }
    std::fflush(stdout);
    world->barrier();
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline_retire: %s\n", e.what());
    return 1;
  }
}
