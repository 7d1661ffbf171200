// SPDX-License-Identifier: Apache-2.0
// The scoped-timer profiler: nothing is recorded while it is off; while on, calls, FLOPs and time
// add up per name, largest time first, and reset() forgets them.
#include "tessel/core/profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

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
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    Scope s("spin");  // busy for 5 ms of this thread's CPU time
    const double start = thread_cpu_seconds();
    while (thread_cpu_seconds() - start < 0.005) {
    }
  }
  add("direct", 0.25, 33.0, 0.125);
  std::vector<Entry> all = snapshot();
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].name, "direct");  // 0.25 s: the largest time comes first
  EXPECT_EQ(all[0].calls, 1);
  EXPECT_DOUBLE_EQ(all[0].flops, 33.0);
  EXPECT_DOUBLE_EQ(all[0].cpu_seconds, 0.125);
  const Entry* sleep = nullptr;
  const Entry* spin = nullptr;
  for (const Entry& e : all) {
    if (e.name == "sleep") sleep = &e;
    if (e.name == "spin") spin = &e;
  }
  ASSERT_NE(sleep, nullptr);
  ASSERT_NE(spin, nullptr);
  EXPECT_GE(sleep->seconds, 0.004);
  EXPECT_LT(sleep->cpu_seconds, sleep->seconds);  // sleeping costs no CPU
  EXPECT_GE(spin->cpu_seconds, 0.005);            // spinning does
  EXPECT_EQ(all[3].name, "gemm");
  EXPECT_EQ(all[3].calls, 3);
  EXPECT_DOUBLE_EQ(all[3].flops, 39.0);
  reset();
  EXPECT_TRUE(snapshot().empty());
}

TEST_F(ProfileTest, ScopeOpenedWhileOffStaysUnrecorded) {
  {
    Scope s("late");
    set_enabled(true);
  }
  EXPECT_TRUE(snapshot().empty());
}

}  // namespace
}  // namespace tessel::profile
