// SPDX-License-Identifier: Apache-2.0
// The memory.* section of the training configuration: byte sizes with units, and what an
// offloaded run refuses before any work (the combinations that are not built yet).
#include <cctype>
#include <cstdint>

#include "tessel/core/error.h"
#include "tessel/train/config.h"

namespace tessel::train {

size_t parse_byte_size(const std::string& key, const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  for (char& ch : unit) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  uint64_t scale = 0;
  const std::pair<const char*, uint64_t> units[] = {{"", 1},
                                                    {"b", 1},
                                                    {"k", 1ull << 10},
                                                    {"kb", 1ull << 10},
                                                    {"kib", 1ull << 10},
                                                    {"m", 1ull << 20},
                                                    {"mb", 1ull << 20},
                                                    {"mib", 1ull << 20},
                                                    {"g", 1ull << 30},
                                                    {"gb", 1ull << 30},
                                                    {"gib", 1ull << 30},
                                                    {"t", 1ull << 40},
                                                    {"tb", 1ull << 40},
                                                    {"tib", 1ull << 40}};
  for (const auto& [name, s] : units)
    if (unit == name) scale = s;
  TESSEL_CHECK(i > 0 && i <= 15 && scale != 0, "training config: ", key, " = \"", text,
               "\" is not a size; expected bytes with an optional unit, e.g. \"512MiB\", "
               "\"2GiB\" or \"4096\"");
  return size_t(std::stoull(text.substr(0, i)) * scale);
}

void validate_memory(const TrainConfig& c) {
  const MemorySection& m = c.memory;
  if (m.enabled()) parse_byte_size("memory.device_budget", m.device_budget);
  parse_byte_size("memory.host_budget", m.host_budget);
  parse_byte_size("memory.nvme_budget", m.nvme_budget);
  TESSEL_CHECK(parse_byte_size("memory.chunk_size", m.chunk_size) > 0,
               "training config: memory.chunk_size must be > 0");
}

void check_offload_settings(const TrainConfig& c) {
  const MemorySection& m = c.memory;
  if (!m.enabled()) {
    TESSEL_CHECK(m.nvme_dir.empty(), "training config: memory.nvme_dir = \"", m.nvme_dir,
                 "\" without memory.device_budget: set the device budget to offload");
    return;
  }
  TESSEL_CHECK(!m.nvme_dir.empty() || parse_byte_size("memory.nvme_budget", m.nvme_budget) == 0,
               "training config: memory.nvme_budget = \"", m.nvme_budget,
               "\" without memory.nvme_dir: set the directory of the NVMe tier");
  TESSEL_CHECK(c.fault.nan_at_step == 0,
               "training config: fault.nan_at_step = ", c.fault.nan_at_step,
               " with memory.device_budget set: not supported under offload");
}

}  // namespace tessel::train
