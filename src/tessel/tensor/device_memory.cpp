// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/device_memory.h"

namespace tessel {

void* device_data(const Tensor& t) {
  TESSEL_CHECK(!t.device().is_meta(), "device_data: tensor of shape ", t.shape(),
               " is on the meta device and has no data");
  return static_cast<char*>(t.storage().data()) + t.offset() * int64_t(t.element_size());
}

Tensor to_device(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  Tensor out = empty(t.shape(), t.dtype(), device);
  out.copy_from(t);
  return out;
}

}  // namespace tessel
