// SPDX-License-Identifier: Apache-2.0
// `tessel data prepare` run as a program: bad invocations exit non-zero with one error line;
// a good one prints a JSON summary and leaves a loadable dataset.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"
#include "tessel/io/token_dataset.h"

namespace {

namespace fs = std::filesystem;
namespace cli_test = tessel::cli_test;

using cli_test::Outcome;
using cli_test::slurp;

fs::path scratch(const std::string& name) {
  return cli_test::scratch("tessel_cli_data_", name);
}

Outcome tessel(const std::string& args, const fs::path& dir) {
  return cli_test::run_tessel(args, dir);
}

// A byte-level vocabulary (no merges) with <|endoftext|>, written as vocab.json + merges.txt.
std::string tiny_tokenizer(const fs::path& dir) {
  fs::create_directories(dir);
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0, shifted = 0;
  for (int b = 0; b < 256; ++b) {
    // GPT-2's byte-to-unicode map: printable bytes stand for themselves, the rest move to U+0100+.
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const int cp = printable ? b : 256 + shifted++;
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    vocab[s] = id++;
  }
  vocab["<|endoftext|>"] = id;
  std::ofstream(dir / "vocab.json") << vocab.dump();
  std::ofstream(dir / "merges.txt") << "#version: 0.2\n";
  return dir.string();
}

void expect_one_error_line(const Outcome& r, const std::string& part) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("tessel: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << "lacks '" << part << "': " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(DataPrepareCommand, MissingTokenizerDirectory) {
  const fs::path d = scratch("no_tokenizer");
  std::ofstream(d / "in.txt") << "a\n%\nb\n";
  expect_one_error_line(tessel("data prepare --tokenizer " + (d / "nope").string() + " --input " +
                                   (d / "in.txt").string() + " --out " + (d / "out").string(),
                               d),
                        "tokenizer");
}

TEST(DataPrepareCommand, NoInputFiles) {
  const fs::path d = scratch("no_input");
  const std::string tok = tiny_tokenizer(d / "tok");
  expect_one_error_line(
      tessel("data prepare --tokenizer " + tok + " --out " + (d / "out").string(), d), "--input");
  expect_one_error_line(tessel("data prepare --tokenizer " + tok + " --input " +
                                   (d / "absent.txt").string() + " --out " + (d / "out").string(),
                               d),
                        "absent.txt");
}

TEST(DataPrepareCommand, BadFractionAndSplit) {
  const fs::path d = scratch("bad_fraction");
  const std::string tok = tiny_tokenizer(d / "tok");
  std::ofstream(d / "in.txt") << "a\n%\nb\n";
  const std::string base = "data prepare --tokenizer " + tok + " --input " +
                           (d / "in.txt").string() + " --out " + (d / "out").string();
  expect_one_error_line(tessel(base + " --val-fraction 1.5", d), "val fraction 1.5");
  expect_one_error_line(tessel(base + " --val-fraction abc", d), "val-fraction");
  expect_one_error_line(tessel(base + " --split lines", d), "--split 'lines'");
  EXPECT_FALSE(fs::exists(d / "out" / "manifest.json"));
}

TEST(DataPrepareCommand, UncreatableOutputDirectoryNamesTheReason) {
  const fs::path d = scratch("bad_out");
  const std::string tok = tiny_tokenizer(d / "tok");
  std::ofstream(d / "in.txt") << "a\n%\nb\n";
  std::ofstream(d / "file") << "x";  // a file where a directory would have to be created
  expect_one_error_line(
      tessel("data prepare --tokenizer " + tok + " --input " + (d / "in.txt").string() + " --out " +
                 (d / "file" / "out").string(),
             d),
      "cannot create output directory '" + (d / "file" / "out").string() + "': Not a directory");
}

TEST(DataPrepareCommand, PreparesALoadableDataset) {
  const fs::path d = scratch("good");
  const std::string tok = tiny_tokenizer(d / "tok");
  std::string text;
  for (int i = 0; i < 40; ++i) text += "fortune number " + std::to_string(i) + "\n%\n";
  std::ofstream(d / "in.txt") << text;
  const Outcome r =
      tessel("data prepare --tokenizer " + tok + " --input " + (d / "in.txt").string() + " --out " +
                 (d / "out").string() + " --val-fraction 0.1 --threads 2",
             d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = nlohmann::json::parse(r.out);
  EXPECT_EQ(summary["train"]["documents"], 36);
  EXPECT_EQ(summary["val"]["documents"], 4);
  EXPECT_EQ(summary["dtype"], "uint16");
  // Not a terminal: the progress bar is one final line, no carriage returns.
  EXPECT_NE(r.err.find("prepare [="), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  const tessel::io::TokenDataset val = tessel::io::TokenDataset::open((d / "out").string(), "val");
  EXPECT_EQ(val.size(), summary["val"]["tokens"].get<int64_t>());
  std::vector<int64_t> ids(size_t(val.size()));
  val.read(0, val.size(), ids.data());
  std::string decoded;
  for (int64_t t : ids) decoded += t == 256 ? std::string("|") : std::string(1, char(t));
  EXPECT_EQ(decoded,
            "fortune number 36\n|fortune number 37\n|fortune number 38\n|fortune number 39\n");
}

}  // namespace
