// SPDX-License-Identifier: Apache-2.0
// The conformance oracle for the chat-template tests: the same templates rendered by Python's
// jinja2 (jinja_reference.py, in transformers' environment), and JSON variables as jinja Values.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessel/serve/jinja_value.h"

namespace tessel::serve::test {

using ojson = nlohmann::ordered_json;

struct ReferenceCase {
  std::string source;
  ojson vars = ojson::object();
};

// What jinja2 made of a case: the text, or that it raised (error holds its message).
struct ReferenceResult {
  bool ok = false;
  std::string text;
  std::string error;
};

inline std::vector<ReferenceResult> jinja2_render(const std::vector<ReferenceCase>& cases) {
  ojson input = ojson::array();
  for (const auto& c : cases) input.push_back({{"source", c.source}, {"vars", c.vars}});
  const auto dir = std::filesystem::temp_directory_path();
  const std::string stem = "tessel_jinja_ref_" + std::to_string(::getpid()) + "_" +
                           std::to_string(reinterpret_cast<uintptr_t>(&cases));
  const auto in_path = dir / (stem + ".json");
  const auto out_path = dir / (stem + ".out.json");
  {
    std::ofstream out(in_path, std::ios::binary);
    out << input.dump();
  }
  const std::string command = std::string(TESSEL_JINJA_PYTHON) + " " + TESSEL_SOURCE_DIR +
                              "/tests/serve/jinja_reference.py < " + in_path.string() + " > " +
                              out_path.string();
  const int rc = std::system(command.c_str());
  std::ifstream in(out_path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  std::filesystem::remove(in_path);
  std::filesystem::remove(out_path);
  EXPECT_EQ(rc, 0) << command << " failed: is python3-jinja2 installed for " << TESSEL_JINJA_PYTHON
                   << "?";
  std::vector<ReferenceResult> results;
  if (rc != 0) return results;
  for (const auto& r : ojson::parse(text)) {
    ReferenceResult result;
    result.ok = r.contains("ok");
    if (result.ok) {
      result.text = r["ok"].get<std::string>();
    } else {
      result.error = r["error"].get<std::string>();
    }
    results.push_back(std::move(result));
  }
  EXPECT_EQ(results.size(), cases.size());
  return results;
}

inline jinja::Value to_value(const ojson& j) {
  using jinja::Value;
  switch (j.type()) {
    case ojson::value_t::null:
      return Value::none();
    case ojson::value_t::boolean:
      return Value::of(j.get<bool>());
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned:
      return Value::of(j.get<int64_t>());
    case ojson::value_t::number_float:
      return Value::of(j.get<double>());
    case ojson::value_t::string:
      return Value::of(j.get<std::string>());
    case ojson::value_t::array: {
      jinja::List items;
      for (const auto& item : j) items.push_back(to_value(item));
      return Value::of(std::move(items));
    }
    case ojson::value_t::object: {
      jinja::Dict d;
      for (const auto& [k, v] : j.items()) d.set(k, to_value(v));
      return Value::of(std::move(d));
    }
    default:
      return Value::undefined();
  }
}

inline std::vector<std::pair<std::string, jinja::Value>> to_globals(const ojson& vars) {
  std::vector<std::pair<std::string, jinja::Value>> out;
  for (const auto& [k, v] : vars.items()) out.emplace_back(k, to_value(v));
  return out;
}

}  // namespace tessel::serve::test
