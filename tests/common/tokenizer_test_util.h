// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the tokenizer tests: a small byte-level vocabulary (byte b has id b), temp
// files, and a check that an Error's message names what was wrong.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "tessel/core/error.h"
#include "tessel/io/byte_level.h"
#include "tessel/io/pretokenize.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {

inline int32_t byte_token(uint8_t b) {
  return b;
}

inline std::string spell(uint8_t b) {
  std::string s;
  append_utf8(byte_to_unicode(b), s);
  return s;
}

// 256 byte tokens, then e!, Ġt, he, Ġthe, in, Ġa (ids 256..261), merged in that order.
inline TokenizerConfig small_config() {
  TokenizerConfig c;
  c.source = "small test vocabulary";
  for (int b = 0; b < 256; ++b) c.vocab.push_back(spell(uint8_t(b)));
  const std::string g = spell(' ');
  c.merges = {{"e", "!"}, {g, "t"}, {"h", "e"}, {g + "t", "he"}, {"i", "n"}, {g, "a"}};
  for (const auto& [a, b] : c.merges) c.vocab.push_back(a + b);
  c.pattern = kGpt2Pattern;
  return c;
}

// Runs fn, which must throw tessel::Error with every one of `parts` in its message.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << parts.front() << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message lacks '" << part << "': " << message;
    }
  }
}

// A fresh directory for one test's files.
inline std::filesystem::path temp_dir(const std::string& name) {
  return tessel::test::scratch_path("tessel_tokenizer_" + name);
}

inline std::string write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

}  // namespace tessel::io
