// SPDX-License-Identifier: Apache-2.0
// The read-bandwidth probe reads every element once, in every kernel set this CPU runs.
#include <gtest/gtest.h>

#include <vector>

#include "tessel/kernels/kernel_set.h"

namespace tessel {
namespace {

TEST(StreamRead, SumCoversEveryElementInEveryKernelSet) {
  for (kernels::KernelSet set : kernels::runnable_kernel_sets()) {
    for (int64_t n : {0, 1, 7, 33, 1001, 4099}) {
      std::vector<float> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i % 7);  // exact in float here
      double want = 0;
      for (float x : v) want += x;
      EXPECT_EQ(kernels::stream_read_sum(set, v.data(), n), float(want))
          << kernels::kernel_set_name(set) << " n " << n;
    }
  }
}

}  // namespace
}  // namespace tessel
