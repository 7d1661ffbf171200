// SPDX-License-Identifier: Apache-2.0
// A thread-local default device for the factories (PyTorch's `with torch.device("meta"):`):
// inside a DefaultDeviceScope(Device::meta()), every factory call that asks for the host
// (explicitly or by default: empty, zeros, full, arange, randn, ...) makes a meta tensor instead.
// This is how a model written for the host is built and run shape-only without editing it.
#pragma once

#include "tessel/tensor/device.h"

namespace tessel {

// The device host requests go to on this thread: cpu unless a scope says otherwise.
Device default_device();

class DefaultDeviceScope {
 public:
  explicit DefaultDeviceScope(Device device);
  ~DefaultDeviceScope();
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  Device previous_;
};

}  // namespace tessel
