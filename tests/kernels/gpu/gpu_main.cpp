// SPDX-License-Identifier: Apache-2.0
// The GPU tests' main: runs them where a CUDA device is visible and exits 77 (CTest's skip code)
// elsewhere, so the suite stays meaningful on machines without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tessel/tensor/device_memory.h"

int main(int argc, char** argv) {
  std::string why;
  if (tessel::cuda_device_count(&why) == 0) {
    std::printf("GPU tests skipped: no CUDA device visible (%s)\n", why.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
