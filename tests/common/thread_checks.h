// SPDX-License-Identifier: Apache-2.0
// For tests on in-process thread worlds: a runner, and expectations made on every rank thread and
// reported once on the test thread (gtest assertions are only reliable on the test's own thread).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/dist/threads/thread_world.h"
#include "tessel/tensor/tensor.h"

namespace tessel::test {

// Runs body(world) on n thread-ranks; a rank that throws fails the run.
inline void run_thread_world(int n, const std::function<void(dist::CommPtr)>& body) {
  dist::ThreadWorld::run(n, [&](dist::Communicator& world) {
    body(dist::CommPtr(&world, [](dist::Communicator*) {}));  // the world outlives the body
  });
}

class ThreadChecks {
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
  template <typename Fn>
  void expect_throw(Fn&& fn, const std::string& needle, const std::string& what) {
    std::string message;
    try {
      fn();
    } catch (const Error& e) {
      message = e.what();
    }
    expect(message.find(needle) != std::string::npos,
           what + ": expected an Error naming '" + needle + "', got '" + message + "'");
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

}  // namespace tessel::test
