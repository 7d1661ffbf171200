// SPDX-License-Identifier: Apache-2.0
// Device: where a tensor's bytes live (the host, or one accelerator by index), or `meta`: no
// bytes at all. A meta tensor has a shape and a dtype and no storage contents (PyTorch's meta
// device): factories, views and copies on it only compute shapes, kernels only report what they
// would do, and reading or writing its data is an Error. The planner traces models this way.
#pragma once

#include <cstdint>
#include <string>

namespace tessel {

enum class DeviceType : uint8_t { CPU, CUDA, Meta };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceType::CUDA, index}; }
  static Device meta() { return {DeviceType::Meta, 0}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_meta() const { return type == DeviceType::Meta; }
  bool operator==(const Device&) const = default;
  std::string str() const {
    if (is_cpu()) return "cpu";
    if (is_meta()) return "meta";
    return "cuda:" + std::to_string(index);
  }
};

}  // namespace tessel
