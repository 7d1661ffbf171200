// SPDX-License-Identifier: Apache-2.0
// Shape, Error / TESSEL_CHECK messages, thread count control.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>

#include "tessel/core/error.h"
#include "tessel/core/log.h"
#include "tessel/core/shape.h"
#include "tessel/core/threads.h"

namespace tessel {
namespace {

TEST(Shape, BasicsAndNegativeIndices) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s[-1], 4);
  EXPECT_EQ(s.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(s.with(1, 7), (Shape{2, 7, 4}));
  EXPECT_EQ(s.without(0), (Shape{3, 4}));
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_THROW(s[3], Error);
  EXPECT_THROW((Shape{2, -1}), Error);
}

TEST(Shape, Broadcast) {
  EXPECT_EQ(broadcast_shapes({7, 1, 13}, {5, 13}), (Shape{7, 5, 13}));
  EXPECT_EQ(broadcast_shapes({1}, {3, 4}), (Shape{3, 4}));
  try {
    broadcast_shapes({7, 13}, {7, 12});
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[7, 13]"), std::string::npos) << m;
    EXPECT_NE(m.find("13 vs 12"), std::string::npos) << m;
  }
}

TEST(Error, CheckCarriesValuesAndLocation) {
  const LogLevel saved = log_level();
  set_log_level(LogLevel::Info);  // whatever TESSEL_LOG says in the environment
  int a = 3, b = 5;
  try {
    TESSEL_CHECK(a == b, "sizes differ: ", a, " vs ", b);
    FAIL();
  } catch (const Error& e) {
    // The message is the user's; the location is ours, in where() (and in the message only at
    // TESSEL_LOG=debug, below).
    EXPECT_EQ(std::string(e.what()), "sizes differ: 3 vs 5");
    EXPECT_NE(e.where().find("core_test.cpp"), std::string::npos) << e.where();
    EXPECT_NE(e.where().find("a == b"), std::string::npos) << e.where();
  }
  EXPECT_NO_THROW(TESSEL_CHECK(a < b, "unused"));
  set_log_level(saved);
}

TEST(Error, DebugLevelAppendsTheLocationToTheMessage) {
  const LogLevel saved = log_level();
  set_log_level(LogLevel::Debug);
  std::string m;
  try {
    TESSEL_FAIL("unsupported: ", 7);
  } catch (const Error& e) {
    m = e.what();
  }
  set_log_level(saved);
  EXPECT_EQ(m.rfind("unsupported: 7 [", 0), 0u) << m;
  EXPECT_NE(m.find("core_test.cpp:"), std::string::npos) << m;
}

TEST(Threads, SetAndParallelForCoversRange) {
  int saved = num_threads();
  for (int t : {1, 2, 4}) {
    set_num_threads(t);
    EXPECT_EQ(num_threads(), t);
    std::vector<std::atomic<int>> hits(1001);
    parallel_for(0, 1001, 10, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) hits[size_t(i)]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
  set_num_threads(saved);
  EXPECT_THROW(set_num_threads(0), Error);
}

}  // namespace
}  // namespace tessel
