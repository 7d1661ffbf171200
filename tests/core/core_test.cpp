// SPDX-License-Identifier: Apache-2.0
// Shape, Error / TESSEL_CHECK messages, thread count control.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/log.h"
#include "tessel/core/shape.h"
#include "tessel/core/thread_pool.h"
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

// The chunks fn sees are fixed by the range and the thread count alone, whoever runs them: results
// of kernels that reduce per chunk stay bitwise the same from run to run.
std::set<std::pair<int64_t, int64_t>> chunks_of(int64_t begin, int64_t end, int64_t grain) {
  std::mutex mu;
  std::set<std::pair<int64_t, int64_t>> seen;
  parallel_for(begin, end, grain, [&](int64_t lo, int64_t hi) {
    std::lock_guard<std::mutex> lock(mu);
    seen.insert({lo, hi});
  });
  return seen;
}

// Turns the persistent pool (thread_pool.h) on for one test, with the given polling time.
class PoolOn {
 public:
  explicit PoolOn(int64_t spin_us) : saved_(detail::pool_spin_us()) {
    detail::set_pool_spin_us(spin_us);
  }
  ~PoolOn() { detail::set_pool_spin_us(saved_); }
  PoolOn(const PoolOn&) = delete;
  PoolOn& operator=(const PoolOn&) = delete;

 private:
  int64_t saved_;
};

TEST(Threads, PoolCoversRangeAtEveryThreadCount) {
  int saved = num_threads();
  for (int64_t spin : {20, 0}) {
    PoolOn pool(spin);
    for (int t : {2, 3, 1, 4}) {
      set_num_threads(t);
      std::vector<std::atomic<int>> hits(1001);
      for (int r = 0; r < 20; ++r) {
        parallel_for(0, 1001, 10, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) hits[size_t(i)]++;
        });
      }
      for (auto& h : hits) EXPECT_EQ(h.load(), 20);
    }
  }
  set_num_threads(saved);
}

TEST(Threads, ChunksDependOnlyOnRangeAndThreadCount) {
  PoolOn pool(20);
  int saved = num_threads();
  set_num_threads(3);
  std::set<std::pair<int64_t, int64_t>> want = {{7, 11}, {11, 15}, {15, 20}};
  EXPECT_EQ(chunks_of(7, 20, 1), want);
  EXPECT_EQ(chunks_of(7, 20, 7), (std::set<std::pair<int64_t, int64_t>>{{7, 13}, {13, 20}}));
  // Four threads starting regions at once: one gets the pool, the others run their chunks inline.
  std::vector<std::thread> callers;
  std::atomic<int> same{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) same += chunks_of(7, 20, 1) == want;
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(same.load(), 200);
  set_num_threads(saved);
}

TEST(Threads, NestedParallelForRunsOnTheCallingThread) {
  PoolOn pool(20);
  int saved = num_threads();
  set_num_threads(2);
  std::atomic<int> inner_calls{0};
  parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    parallel_for(0, 100, 1, [&](int64_t lo, int64_t hi) {
      EXPECT_EQ(lo, 0);
      EXPECT_EQ(hi, 100);
      inner_calls++;
    });
  });
  EXPECT_EQ(inner_calls.load(), 2);
  set_num_threads(saved);
}

// With the pool, an exception thrown by any chunk, on a worker too, reaches the caller once all
// chunks are done (an OpenMP region terminates the process instead).
TEST(Threads, ParallelForRethrowsAChunksException) {
  PoolOn pool(0);
  int saved = num_threads();
  set_num_threads(2);
  for (int r = 0; r < 20; ++r) {
    std::atomic<int> ran{0};
    EXPECT_THROW(parallel_for(0, 13, 1,
                              [&](int64_t lo, int64_t) {
                                ran++;
                                if (lo != 0) throw std::runtime_error("chunk failed");
                                std::this_thread::sleep_for(std::chrono::milliseconds(1));
                              }),
                 std::runtime_error);
    EXPECT_GE(ran.load(), 1);
    std::vector<int> hits(33, 0);
    parallel_for(0, 33, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) hits[size_t(i)]++;
    });
    EXPECT_EQ(hits, std::vector<int>(33, 1));  // the pool works after a failed region
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace tessel
