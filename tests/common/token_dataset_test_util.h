// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the token dataset tests (tests/io) and the `tessel train` tests (tests/cli): a
// small byte-level tokenizer written as vocab.json + merges.txt (with <|endoftext|>), temp
// directories, and file patching.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "tokenizer_test_util.h"

namespace tessel::io {

inline std::filesystem::path data_temp_dir(const std::string& name) {
  return tessel::test::scratch_path("tessel_token_dataset_" + name);
}

// The small test vocabulary (bytes, then a few merges), <|endoftext|> last, and `extra` unused
// tokens before it (to make vocabularies that need uint32).
inline std::string write_small_tokenizer(const std::filesystem::path& dir, int extra = 0) {
  std::filesystem::create_directories(dir);
  const TokenizerConfig c = small_config();
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < c.vocab.size(); ++i) vocab[c.vocab[i]] = i;
  int64_t next = int64_t(c.vocab.size());
  for (int i = 0; i < extra; ++i) vocab["<extra_" + std::to_string(i) + ">"] = next++;
  vocab["<|endoftext|>"] = next;
  std::ofstream(dir / "vocab.json") << vocab.dump();
  std::ofstream merges(dir / "merges.txt");
  merges << "#version: 0.2\n";
  for (const auto& [a, b] : c.merges) merges << a << " " << b << "\n";
  return dir.string();
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace tessel::io
