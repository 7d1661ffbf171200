// SPDX-License-Identifier: Apache-2.0
// CUDA tensors where no GPU can be used (tensor/device_memory.h): host code cannot read device
// memory, and a request for a CUDA device says why it cannot be served. The GPU tests
// (tests/kernels/gpu/) cover the same API on a device.
#include "tessel/tensor/device_memory.h"

#include <gtest/gtest.h>

#include <string>

#include "tessel/tensor/tensor.h"

namespace tessel {
namespace {

// A tensor that claims to live on cuda:0 at an address host code must never touch.
Tensor fake_cuda_tensor(void* address) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(address, 64, Device::cuda(0), nullptr);
  impl->offset = 2;
  impl->shape = Shape({4});
  impl->dtype = DType::F32;
  return Tensor(std::move(impl));
}

TEST(DeviceMemory, HostReadsOfCudaTensorsAreRefused) {
  alignas(64) static char guard[64];
  Tensor t = fake_cuda_tensor(guard);
  try {
    t.data_ptr();
    FAIL() << "data_ptr of a cuda tensor must throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("on cuda:0"), std::string::npos) << what;
    EXPECT_NE(what.find("to_device"), std::string::npos) << what;
  }
  EXPECT_THROW(t.item(), Error);
  EXPECT_THROW(t.to_vector<float>(), Error);
  EXPECT_THROW(t.str(), Error);
  // Device code gets the address (element offset included).
  EXPECT_EQ(device_data(t), guard + 2 * sizeof(float));
}

// Without a usable device every way to a CUDA tensor ends in one Error that says why.
TEST(DeviceMemory, CudaRequestsSayWhyTheyCannotBeServed) {
  std::string why;
  if (cuda_device_count(&why) > 0) GTEST_SKIP() << "a CUDA device is visible";
  const std::string expected =
      built_with_cuda() ? "no CUDA device visible: " + why : std::string("built without CUDA");
  for (auto attempt : {+[] { empty({3}, DType::F32, Device::cuda(0)); },
                       +[] { zeros({3}, DType::F32, Device::cuda(1)); },
                       +[] { to_device(ones({2}), Device::cuda(0)); },
                       +[] { require_cuda_device(Device::cuda(0)); }}) {
    try {
      attempt();
      ADD_FAILURE() << "expected an Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << e.what() << "\nexpected: " << expected;
    }
  }
}

// The device names of --device and train.device; anything else is an Error that quotes it.
TEST(DeviceMemory, ParsesDeviceNames) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:0"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:13"), Device::cuda(13));
  for (const char* bad : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:12345", "CPU", "cuda0"}) {
    try {
      parse_device(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace tessel
