// SPDX-License-Identifier: Apache-2.0
// Internal to models: a config.json text parsed into a JSON object, the first step of the
// registry's family dispatch and of every family's config parser; errors name `what`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tessel/core/error.h"

namespace tessel::models {

inline nlohmann::json parse_config_object(const std::string& text, const std::string& what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL(what, ": not valid JSON: ", e.what());
  }
  TESSEL_CHECK(j.is_object(), what, ": expected a JSON object, got ", j.type_name());
  return j;
}

}  // namespace tessel::models
