// SPDX-License-Identifier: Apache-2.0
// The progress lane drops a task (and what it captured: a collective's tensors) before its Work
// reports completion, so the waiting code holds the last references and buffers are freed where
// it drops them: a step's measured peak must not depend on when the lane thread next runs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "tessel/dist/work.h"

namespace tessel::dist {
namespace {

// Slow to destroy, like a large buffer's release on a preempted thread.
struct SlowToFree {
  explicit SlowToFree(std::atomic<bool>* f) : freed(f) {}
  std::atomic<bool>* freed;
  ~SlowToFree() {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    freed->store(true);
  }
};

TEST(ProgressLane, DropsTheTaskBeforeReportingCompletion) {
  ProgressLane lane("test");
  for (int round = 0; round < 3; ++round) {
    std::atomic<bool> freed{false};
    auto held = std::make_shared<SlowToFree>(&freed);
    WorkPtr work = lane.submit([held] {});
    held.reset();  // the task's copy is now the only one
    work->wait();
    EXPECT_TRUE(freed.load()) << "round " << round << ": the task outlived wait()";
  }
}

TEST(ProgressLane, DropsAFailedTaskBeforeReportingItsError) {
  ProgressLane lane("test");
  std::atomic<bool> freed{false};
  auto held = std::make_shared<SlowToFree>(&freed);
  WorkPtr work = lane.submit([held] { throw std::runtime_error("failed collective"); });
  held.reset();
  EXPECT_THROW(work->wait(), std::runtime_error);
  EXPECT_TRUE(freed.load());
}

}  // namespace
}  // namespace tessel::dist
