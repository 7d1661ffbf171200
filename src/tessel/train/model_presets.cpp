// SPDX-License-Identifier: Apache-2.0
// Model presets and the resolution of `model.config`. The GPT-2 sizes carry both of the names
// people use for them: the parameter count (124M, as tessel bench and the papers write it) and the
// Hugging Face checkpoint's size word (gpt2 "small", gpt2-medium, -large, -xl).
#include "tessel/train/model_presets.h"

#include <algorithm>
#include <filesystem>

#include "tessel/core/log.h"

namespace tessel::train {

namespace fs = std::filesystem;

namespace {

struct Preset {
  const char* name;
  const char* size;  // GPT2Config::preset's name; nullptr: tessel's own "tiny"
};

constexpr Preset kPresets[] = {{"tiny", nullptr},  {"small", "124M"}, {"124M", "124M"},
                               {"medium", "355M"}, {"355M", "355M"},  {"large", "774M"},
                               {"774M", "774M"},   {"xl", "1558M"},   {"1558M", "1558M"}};

// The default small model: about 11.5M parameters, most of them in the 50,257-token wte.
models::GPT2Config tiny() {
  models::GPT2Config c;
  c.n_positions = 256;
  c.n_embd = 192;
  c.n_layer = 4;
  c.n_head = 6;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  return c;
}

std::string preset_list() {
  std::string out;
  for (const Preset& p : kPresets) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

}  // namespace

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Preset& p : kPresets) v.emplace_back(p.name);
    return v;
  }();
  return names;
}

bool is_model_preset(const std::string& name) {
  const auto& names = model_preset_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

models::GPT2Config resolve_model_config(const std::string& spec, const std::string& key) {
  for (const Preset& p : kPresets) {
    if (spec != p.name) continue;
    std::error_code ec;
    if (fs::exists(spec, ec)) {
      log(LogLevel::Warn, key, " = '", spec, "' is the preset of that name; to use the ",
          fs::is_directory(spec, ec) ? "directory" : "file", " '", spec,
          "' in the working directory write it as a path: ./", spec);
    }
    return p.size ? models::GPT2Config::preset(p.size) : tiny();
  }
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    TESSEL_CHECK(fs::exists(fs::path(spec) / "config.json", ec), key, ": directory ", spec,
                 " has no config.json");
    return models::GPT2Config::from_file((fs::path(spec) / "config.json").string());
  }
  if (fs::is_regular_file(spec, ec)) return models::GPT2Config::from_file(spec);
  TESSEL_FAIL(key, " = '", spec, "' is neither a preset (", preset_list(),
              ") nor an existing config.json file or model directory");
}

}  // namespace tessel::train
