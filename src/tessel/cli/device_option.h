// SPDX-License-Identifier: Apache-2.0
// `--device cpu | cuda | cuda:N` on the commands that run models (train, generate, eval, serve,
// bench and bench's subcommands). cpu is the default. A CUDA choice is checked while the command
// line is parsed, before any work: a build without CUDA, a machine without a visible device, an
// index past the last device, and a command that does not run on CUDA (yet) each end the
// program with one line naming the reason.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tessel/models/causal_lm.h"
#include "tessel/tensor/device.h"

namespace tessel::cli {

// "cpu", "cuda" (= cuda:0) or "cuda:N"; Error otherwise.
Device parse_device(const std::string& text);
// With `choice`, the command runs on CUDA and the device parsed ("cpu", "cuda:N") is stored there;
// without, a CUDA device is refused by name.
void add_device_option(CLI::App& cmd, std::string* choice = nullptr);

// Moves a loaded model to `device` (as parsed by the option) for `command`, after checking that
// every weight is a float tensor the CUDA backend computes with (quantized weights are refused by
// name); prints one line saying where it went.
void move_model_to_device(models::CausalLM& model, const std::string& device, const char* command);

}  // namespace tessel::cli
