// SPDX-License-Identifier: Apache-2.0
// `tessel data prepare` with GPT-2's real vocabulary on real English text (the license texts every
// Debian system ships, linked duplicates included): the shards hold exactly the ids the tokenizer
// gives each document, joined by <|endoftext|>, and decode back to the files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_run.h"
#include "common/scratch_dir.h"
#include "tessel/io/token_dataset.h"
#include "tessel/io/token_dataset_prepare.h"
#include "tessel/io/tokenizer.h"

namespace {

namespace fs = std::filesystem;
namespace cli_test = tessel::cli_test;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

using cli_test::slurp;

std::vector<int32_t> tokens(const tessel::io::TokenDataset& d) {
  std::vector<int64_t> ids(size_t(d.size()));
  d.read(0, d.size(), ids.data());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

TEST(DataPrepareGpt2, LicenseTextsRoundTrip) {
  const std::string gpt2 = env_or("TESSEL_GPT2_DIR", TESSEL_GPT2_DIR);
  const std::string corpus = env_or("TESSEL_DATA_CORPUS", TESSEL_DATA_CORPUS);
  const fs::path out = tessel::test::scratch_path("tessel_cli_data_gpt2", /*create=*/false);
  tessel::test::remove_at_exit(out.string() + ".json");
  const std::string cmd = std::string(TESSEL_BINARY) + " data prepare --tokenizer " + gpt2 +
                          " --input " + corpus + " --out " + out.string() +
                          " --val-fraction 0.25 --shard-tokens 5000 --quiet > " +
                          (out.string() + ".json");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto summary = nlohmann::json::parse(slurp(out.string() + ".json"));

  // The expected stream: each distinct file (sorted by name, links to files already read
  // skipped) is one document.
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(corpus)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::set<fs::path> seen;
  std::vector<std::string> docs;
  for (const auto& f : files) {
    if (seen.insert(fs::canonical(f)).second) docs.push_back(slurp(f));
  }
  ASSERT_GE(docs.size(), 4u);
  EXPECT_EQ(summary["inputs"], docs.size());
  const auto tok = tessel::io::Tokenizer::load(gpt2);
  const int32_t eot = *tok.special_token_id("<|endoftext|>");
  EXPECT_EQ(eot, 50256);
  const size_t n_val = size_t(std::llround(0.25 * double(docs.size())));
  auto expected = [&](size_t begin, size_t end) {
    std::vector<int32_t> ids;
    for (size_t i = begin; i < end; ++i) {
      if (i > begin) ids.push_back(eot);
      tok.encode_append(docs[i], ids);
    }
    return ids;
  };
  const auto train = tessel::io::TokenDataset::open(out.string(), "train");
  const auto val = tessel::io::TokenDataset::open(out.string(), "val");
  EXPECT_GT(train.shards().size(), 1u);
  EXPECT_EQ(tokens(train), expected(0, docs.size() - n_val));
  EXPECT_EQ(tokens(val), expected(docs.size() - n_val, docs.size()));
  std::string text = tok.decode_bytes(tokens(val));
  std::string joined;
  for (size_t i = docs.size() - n_val; i < docs.size(); ++i) {
    joined += (i > docs.size() - n_val ? "<|endoftext|>" : "") + docs[i];
  }
  EXPECT_EQ(text, joined);
}

}  // namespace
