// SPDX-License-Identifier: Apache-2.0
// The resolution of `model.config`: which of a preset (a model family's, models::find_preset), a
// config.json file or a model directory a name means.
#include "tessel/train/model_presets.h"

#include <algorithm>
#include <filesystem>

#include "tessel/core/log.h"

namespace tessel::train {

namespace fs = std::filesystem;

namespace {

std::string preset_list() {
  std::string out;
  for (const std::string& name : models::all_preset_names())
    out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

bool is_model_preset(const std::string& name) {
  return models::is_preset(name);
}

models::ConfigPtr resolve_model_config(const std::string& spec, const std::string& key) {
  if (is_model_preset(spec)) {
    std::error_code ec;
    if (fs::exists(spec, ec)) {
      log(LogLevel::Warn, key, " = '", spec, "' is the preset of that name; to use the ",
          fs::is_directory(spec, ec) ? "directory" : "file", " '", spec,
          "' in the working directory write it as a path: ./", spec);
    }
    return models::find_preset(spec);
  }
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    TESSEL_CHECK(fs::exists(fs::path(spec) / "config.json", ec), key, ": directory ", spec,
                 " has no config.json");
    return models::load_model_config((fs::path(spec) / "config.json").string());
  }
  if (fs::is_regular_file(spec, ec)) return models::load_model_config(spec);
  TESSEL_FAIL(key, " = '", spec, "' is neither a preset (", preset_list(),
              ") nor an existing config.json file or model directory");
}

}  // namespace tessel::train
