// SPDX-License-Identifier: Apache-2.0
// The scoped-timer profiler: nothing is recorded while it is off; while on, calls, FLOPs and time
// add up per name, largest time first, and reset() forgets them.
#include "tessel/core/profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace tessel::profile {
namespace {

class ProfileTest : public ::testing::Test {
 protected:
  void SetUp() override { reset(); }
  void TearDown() override {
    set_enabled(false);
    reset();
  }
};

TEST_F(ProfileTest, OffRecordsNothing) {
  ASSERT_FALSE(enabled());
  { Scope s("off", 7.0); }
  EXPECT_TRUE(snapshot().empty());
}

TEST_F(ProfileTest, ScopesAddUpPerName) {
  set_enabled(true);
  for (int i = 0; i < 3; ++i) Scope s("gemm", 13.0);
  {
    Scope s("sleep");
    // Long enough that three empty scopes, each possibly descheduled on a loaded machine, stay
    // shorter (5 ms did not: a scope that lost its core took longer).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  add("direct", 2.5, 33.0);
  std::vector<Entry> all = snapshot();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].name, "direct");  // 2.5 s: the largest time comes first
  EXPECT_EQ(all[0].calls, 1);
  EXPECT_DOUBLE_EQ(all[0].flops, 33.0);
  EXPECT_EQ(all[1].name, "sleep");
  EXPECT_GE(all[1].seconds, 0.099);
  EXPECT_EQ(all[2].name, "gemm");
  EXPECT_EQ(all[2].calls, 3);
  EXPECT_DOUBLE_EQ(all[2].flops, 39.0);
  reset();
  EXPECT_TRUE(snapshot().empty());
}

TEST_F(ProfileTest, ScopesCountTheirThreadsCpuTime) {
  set_enabled(true);
  {
    Scope s("spin");
    // Busy until this thread has run 2 ms: CPU time the scope must report.
    const double start = thread_cpu_seconds();
    while (thread_cpu_seconds() - start < 0.002) {
    }
  }
  add("direct", 0.25, 0.0, 0.125);
  std::vector<Entry> all = snapshot();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "direct");
  EXPECT_DOUBLE_EQ(all[0].cpu_seconds, 0.125);
  EXPECT_EQ(all[1].name, "spin");
  EXPECT_GE(all[1].cpu_seconds, 0.002);
  EXPECT_GE(all[1].seconds, all[1].cpu_seconds * 0.999);  // one thread: never more CPU than wall
}

TEST_F(ProfileTest, ScopeOpenedWhileOffStaysUnrecorded) {
  {
    Scope s("late");
    set_enabled(true);
  }
  EXPECT_TRUE(snapshot().empty());
}

// The exit report: a title line with the total, then one line per name, largest first, with its
// share, calls and (when counted) GFLOP/s; at most `limit` lines.
TEST_F(ProfileTest, ReportListsTheLargestFirstWithShareAndRate) {
  const std::vector<Entry> entries = {{"gemm.NN 7x13x33", 4, 0.3, 3e9, 0.3},
                                      {"layer_norm", 2, 0.1, 0, 0.1},
                                      {"softmax", 1, 0.05, 0, 0.05}};
  const std::string r = format_report(entries, "TITLE", 2);
  EXPECT_EQ(r.rfind("tessel: TITLE: 450.0 ms in 3 kinds of call\n", 0), 0u) << r;
  EXPECT_NE(r.find("300.00 ms  66.7%       4 calls  gemm.NN 7x13x33 10 GFLOP/s\n"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("100.00 ms  22.2%       2 calls  layer_norm\n"), std::string::npos) << r;
  EXPECT_EQ(r.find("softmax"), std::string::npos) << r;  // past the limit
}

}  // namespace
}  // namespace tessel::profile
