// SPDX-License-Identifier: Apache-2.0
#include "tessel/cli/device_option.h"

#include <cctype>
#include <cstdio>

#include "tessel/core/error.h"
#include "tessel/nn/device_move.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::cli {

Device parse_device(const std::string& text) {
  try {
    return tessel::parse_device(text);
  } catch (const Error&) {
    TESSEL_FAIL("--device '", text, "': expected cpu, cuda or cuda:N");
  }
}

void add_device_option(CLI::App& cmd, std::string* choice) {
  std::string command = cmd.get_name();
  for (const CLI::App* p = cmd.get_parent(); p != nullptr && p->get_parent() != nullptr;
       p = p->get_parent())
    command = p->get_name() + " " + command;
  cmd.add_option_function<std::string>(
         "--device",
         [command, choice](const std::string& text) {
           Device device = parse_device(text);
           if (choice != nullptr) *choice = device.str();
           if (device.is_cpu()) return;
           require_cuda_device(device);
           TESSEL_CHECK(choice != nullptr, "--device ", device.str(), ": `tessel ", command,
                        "` does not run on CUDA yet (train and generate do; docs/KERNELS.md)");
         },
         "Device to run on: cpu (default), cuda or cuda:N")
      ->trigger_on_parse();
}

void move_model_to_device(models::CausalLM& model, const std::string& device, const char* command) {
  const Device d = parse_device(device);
  if (d.is_cpu()) return;
  require_cuda_device(d);
  nn::NamedTensors state = model.named_parameters();
  for (auto& b : model.named_buffers()) state.push_back(b);
  for (const auto& [name, t] : state)
    TESSEL_CHECK(dtype_is_float(t.dtype()), command, " --device ", device, ": ", name, " is ",
                 dtype_name(t.dtype()),
                 " (quantized weights run on the CPU only; the CUDA backend has no quantized "
                 "GEMM yet): use a float model or --weights stored");
  const int64_t bytes = nn::move_to_device(model, d);
  std::fprintf(stderr, "tessel: %s: the model is on %s (%lld MiB)\n", command, d.str().c_str(),
               static_cast<long long>(bytes >> 20));
}

}  // namespace tessel::cli
