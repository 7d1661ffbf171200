// SPDX-License-Identifier: Apache-2.0
// backend_for(Device::cuda(i)) where no GPU can be used: one Error that says why (a build
// without CUDA, or no visible device). The GPU tests (tests/kernels/gpu/) cover it on a device.
#include <gtest/gtest.h>

#include <string>

#include "tessel/kernels/backend.h"
#include "tessel/tensor/device_memory.h"

namespace tessel {
namespace {

TEST(CudaBackendChoice, SaysWhyThereIsNone) {
  std::string why;
  if (cuda_device_count(&why) > 0) GTEST_SKIP() << "a CUDA device is visible";
  const std::string expected =
      built_with_cuda() ? "no CUDA device visible: " + why : std::string("built without CUDA");
  try {
    kernels::backend_for(Device::cuda(0));
    FAIL() << "backend_for(cuda:0) must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessel
