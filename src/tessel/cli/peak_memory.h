// SPDX-License-Identifier: Apache-2.0
// The line `tessel generate` and `tessel eval` end with: what the operating system counted
// against the process (its peak resident set, VmHWM, and its peak address space, VmPeak; the
// trainer's figures, core/process_memory.h), so that what loading and running a model cost is
// visible beside what the model's weights are. Under mpirun every rank prints its own.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tessel::cli {

// "peak RSS 512.3 MiB (VmHWM), peak address space 1.21 GiB (VmPeak)" ("rank R " in front when
// `rank` >= 0).
std::string peak_memory_line(int rank = -1);
// The same figures as JSON fields: peak_rss_bytes, peak_vm_bytes.
void add_peak_memory(nlohmann::json& out);

}  // namespace tessel::cli
