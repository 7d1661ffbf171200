// SPDX-License-Identifier: Apache-2.0
// Helpers of the sharding tests: a thread world runner whose checks, made on every rank thread,
// are reported once on the test thread, and deterministic data every rank can recompute.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "tessel/core/rng.h"
#include "tessel/dist/threads/thread_world.h"
#include "tessel/tensor/tensor.h"

namespace tessel::sharding::test {

class Checks {
 public:
  void expect(bool ok, const std::string& what) {
    std::lock_guard lock(mutex_);
    ++checks_;
    if (!ok && failures_++ < 10) report_ += what + "\n";
  }
  // Largest absolute difference, and a failure naming it when above tol (or shapes differ).
  void expect_close(const Tensor& got, const std::vector<double>& want, const Shape& shape,
                    double tol, const std::string& what) {
    if (got.shape() != shape) {
      std::ostringstream s;
      s << what << ": shape " << got.shape() << ", expected " << shape;
      expect(false, s.str());
      return;
    }
    std::vector<double> g = got.to_vector<double>();
    double worst = 0;
    for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - want[i]));
    expect(worst <= tol, what + ": max abs error " + std::to_string(worst));
  }
  void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
    expect_close(got, want.to_vector<double>(), want.shape(), tol, what);
  }
  void verify() const {
    EXPECT_EQ(failures_, 0) << report_;
    EXPECT_GT(checks_, 0);
  }

 private:
  std::mutex mutex_;
  int checks_ = 0, failures_ = 0;
  std::string report_;
};

// Runs body(world) on n thread-ranks; a rank that throws fails the run.
inline void run_world(int n, const std::function<void(dist::CommPtr)>& body) {
  dist::ThreadWorld::run(n, [&](dist::Communicator& world) {
    body(dist::CommPtr(&world, [](dist::Communicator*) {}));  // the world outlives the body
  });
}

// The same values on every rank that asks with the same seed.
inline Tensor random(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::F32, &g);
}

}  // namespace tessel::sharding::test
