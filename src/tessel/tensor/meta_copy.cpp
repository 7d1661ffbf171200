// SPDX-License-Identifier: Apache-2.0
// The thread-local state of the meta device: the copy observer behind tensor/meta_copy.h and the
// default device behind tensor/default_device.h.
#include "tessel/tensor/meta_copy.h"

#include "tessel/tensor/default_device.h"

namespace tessel {

namespace {
thread_local MetaCopyObserver t_observer = nullptr;
thread_local Device t_default_device = Device::cpu();
}  // namespace

Device default_device() {
  return t_default_device;
}

DefaultDeviceScope::DefaultDeviceScope(Device device) : previous_(t_default_device) {
  t_default_device = device;
}

DefaultDeviceScope::~DefaultDeviceScope() {
  t_default_device = previous_;
}

MetaCopyObserver exchange_meta_copy_observer(MetaCopyObserver observer) {
  MetaCopyObserver previous = t_observer;
  t_observer = observer;
  return previous;
}

void report_meta_copy(std::string_view what, std::span<const Tensor> inputs,
                      std::span<const Tensor> outputs) {
  if (t_observer != nullptr) t_observer(what, inputs, outputs);
}

}  // namespace tessel
