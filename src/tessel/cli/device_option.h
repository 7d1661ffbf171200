// SPDX-License-Identifier: Apache-2.0
// `--device cpu | cuda | cuda:N` on the commands that run models (train, generate, eval, serve,
// bench and bench's subcommands). cpu is the default. A CUDA choice is checked while the command
// line is parsed, before any work: a build without CUDA, a machine without a visible device, an
// index past the last device, and (for now) a command that does not run on CUDA each end the
// program with one line naming the reason.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tessel/tensor/device.h"

namespace tessel::cli {

// "cpu", "cuda" (= cuda:0) or "cuda:N"; Error otherwise.
Device parse_device(const std::string& text);
void add_device_option(CLI::App& cmd);

}  // namespace tessel::cli
