// SPDX-License-Identifier: Apache-2.0
// nn::move_to_device where no GPU can be used: moving to the host is a no-op that keeps every
// tensor's identity, a CUDA target is refused with the reason (no device, or a build without
// CUDA) before anything moves, and a device that holds no state is refused by name. The moves
// themselves, host to GPU and back, are checked on a GPU by tests/train/gpu/.
#include "tessel/nn/device_move.h"

#include <gtest/gtest.h>

#include <string>

#include "tessel/nn/nn.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::nn {
namespace {

TEST(DeviceMove, ToTheHostKeepsEveryTensor) {
  Generator g(7);
  Linear layer(13, 7, true, Init::normal(&g, 0.5));
  const Tensor w = layer.weight;
  const std::vector<float> before = w.to_vector<float>();
  EXPECT_EQ(move_to_device(layer, Device::cpu()), 0);
  EXPECT_TRUE(layer.weight.is_same(w));
  EXPECT_EQ(layer.weight.to_vector<float>(), before);
  EXPECT_EQ(move_to_device(layer.named_parameters(), Device::cpu()), 0);
}

TEST(DeviceMove, RefusesWhatCannotHoldState) {
  Generator g(7);
  Linear layer(7, 33, true, Init::normal(&g, 0.5));
  const std::vector<float> before = layer.weight.to_vector<float>();
  try {
    move_to_device(layer, Device::meta());
    ADD_FAILURE() << "moved to meta";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("to meta"), std::string::npos) << e.what();
  }
  std::string why;
  if (cuda_device_count(&why) == 0) {
    EXPECT_THROW(move_to_device(layer, Device::cuda(0)), Error);
    // Nothing moved: the layer still computes on the host.
    EXPECT_TRUE(layer.weight.device().is_cpu());
    EXPECT_EQ(layer.weight.to_vector<float>(), before);
  }
}

}  // namespace
}  // namespace tessel::nn
