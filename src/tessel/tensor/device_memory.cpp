// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/device_memory.h"

#include <cctype>

namespace tessel {

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  const std::string prefix = "cuda:";
  if (text.size() > prefix.size() && text.size() <= prefix.size() + 4 &&
      text.compare(0, prefix.size(), prefix) == 0) {
    bool digits = true;
    for (size_t i = prefix.size(); i < text.size(); ++i)
      digits = digits && std::isdigit(static_cast<unsigned char>(text[i]));
    if (digits) return Device::cuda(std::stoi(text.substr(prefix.size())));
  }
  TESSEL_FAIL("device '", text, "': expected cpu, cuda or cuda:N");
}

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
