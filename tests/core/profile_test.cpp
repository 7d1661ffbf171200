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
  add("direct", 0.25, 33.0);
  std::vector<Entry> all = snapshot();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].name, "direct");  // 0.25 s: the largest time comes first
  EXPECT_EQ(all[0].calls, 1);
  EXPECT_DOUBLE_EQ(all[0].flops, 33.0);
  EXPECT_EQ(all[1].name, "sleep");
  EXPECT_GE(all[1].seconds, 0.004);
  EXPECT_EQ(all[2].name, "gemm");
  EXPECT_EQ(all[2].calls, 3);
  EXPECT_DOUBLE_EQ(all[2].flops, 39.0);
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
