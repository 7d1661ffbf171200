// SPDX-License-Identifier: Apache-2.0
// What `model.config` (and `model.init_from`) name: a preset, an HF config.json, or a model
// directory. A preset name always means the preset, even where a file or directory of that name
// lies in the working directory (a path is written as one: ./small, runs/x/step_000600).
#pragma once

#include <string>
#include <vector>

#include "tessel/models/family.h"

namespace tessel::train {

// Whether `name` is a preset of some model family (models::is_preset).
bool is_model_preset(const std::string& name);

// The model configuration `spec` names (a preset, a config.json path or a model directory); an
// Error naming the presets when it is none of them.
models::ConfigPtr resolve_model_config(const std::string& spec,
                                       const std::string& key = "model.config");

}  // namespace tessel::train
