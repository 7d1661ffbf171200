// SPDX-License-Identifier: Apache-2.0
#include "tessel/cli/device_option.h"

#include <cctype>

#include "tessel/core/error.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::cli {

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
  TESSEL_FAIL("--device '", text, "': expected cpu, cuda or cuda:N");
}

void add_device_option(CLI::App& cmd) {
  std::string command = cmd.get_name();
  for (const CLI::App* p = cmd.get_parent(); p != nullptr && p->get_parent() != nullptr;
       p = p->get_parent())
    command = p->get_name() + " " + command;
  cmd.add_option_function<std::string>(
         "--device",
         [command](const std::string& text) {
           Device device = parse_device(text);
           if (device.is_cpu()) return;
           require_cuda_device(device);
           TESSEL_FAIL("--device ", device.str(), ": `tessel ", command,
                       "` does not run on CUDA yet (the CUDA backend has gemm and dtype "
                       "conversion so far; docs/KERNELS.md)");
         },
         "Device to run on: cpu (default), cuda or cuda:N")
      ->trigger_on_parse();
}

}  // namespace tessel::cli
