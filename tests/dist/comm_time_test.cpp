// SPDX-License-Identifier: Apache-2.0
// The per-label blocking time: a blocking collective adds to its communicator's label on the
// calling thread, and to no other label; asynchronous calls add nothing on the caller (their
// waits are the caller's to time).
#include "tessel/dist/comm_time.h"

#include <gtest/gtest.h>

#include "common/thread_checks.h"
#include "tessel/tensor/tensor.h"

namespace tessel {
namespace {

TEST(CommTime, BlockingCollectivesCountOnTheirLabel) {
  test::run_thread_world(3, [](dist::CommPtr world) {
    const std::string label = world->label();
    const double before = dist::blocking_ms(label);
    const double other = dist::blocking_ms("no-such-axis-7");
    Tensor t = full({13}, 1.0);
    world->all_reduce(t);
    EXPECT_FLOAT_EQ(t.data<float>()[12], 3.0f);
    const double after_blocking = dist::blocking_ms(label);
    EXPECT_GT(after_blocking, before);
    EXPECT_EQ(dist::blocking_ms("no-such-axis-7"), other);
    Tensor u = full({7}, 2.0);
    world->all_reduce_async(u)->wait();
    EXPECT_FLOAT_EQ(u.data<float>()[6], 6.0f);
    EXPECT_EQ(dist::blocking_ms(label), after_blocking);
  });
}

}  // namespace
}  // namespace tessel
