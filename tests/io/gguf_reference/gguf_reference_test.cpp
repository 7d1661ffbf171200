// SPDX-License-Identifier: Apache-2.0
// GGUF against an independent implementation, Hugging Face's JavaScript @huggingface/gguf
// (installed into the build tree by tests/io/gguf_reference_fixture.sh): files tessel writes are
// read by it with the same header, every metadata key with the same value type, element type and
// value (nested arrays, 64-bit integers, floats, a tokenizer's keys), and the same tensor names,
// dims, ggml types and offsets as tessel's own reader; and a file its serializer writes (every
// value type, alignment 64) is read by tessel as written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/scratch_dir.h"
#include "common/tokenizer_test_util.h"
#include "io/gguf_sample.h"
#include "tessel/io/gguf.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// An integer as the script prints it: a decimal string (BigInt) or {"number": n}.
std::string integer_text(const json& j) {
  return j.is_string() ? j.get<std::string>() : std::to_string(j.at("number").get<int64_t>());
}

void expect_same(const GgufValue& v, const json& j, const std::string& where) {
  switch (v.type) {
    case GgufType::Array:
      ASSERT_TRUE(j.is_array()) << where << ": " << j.dump();
      ASSERT_EQ(j.size(), v.items.size()) << where;
      for (size_t i = 0; i < v.items.size(); ++i)
        expect_same(v.items[i], j[i], where + "[" + std::to_string(i) + "]");
      return;
    case GgufType::String:
      EXPECT_EQ(j.get<std::string>(), v.str) << where;
      return;
    case GgufType::Bool:
      EXPECT_EQ(j.get<bool>(), v.uint != 0) << where;
      return;
    case GgufType::F32:
    case GgufType::F64:
      EXPECT_EQ(j.is_object() ? j.at("number").get<double>() : j.get<double>(), v.real) << where;
      return;
    case GgufType::U8:
    case GgufType::U16:
    case GgufType::U32:
    case GgufType::U64:
      EXPECT_EQ(integer_text(j), std::to_string(v.uint)) << where;
      return;
    default:
      EXPECT_EQ(integer_text(j), std::to_string(v.sint)) << where;
      return;
  }
}

json read_with_javascript(const std::string& file, const fs::path& dir) {
  const std::string out = (dir / "reference.json").string();
  const std::string cmd = std::string(TESSEL_NODE) + " " + TESSEL_GGUF_SCRIPT + " " +
                          TESSEL_GGUF_PACKAGE + " " + file + " > " + out;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  return json::parse(in);
}

TEST(GgufReference, JavaScriptReaderSeesWhatTesselWrote) {
  const fs::path dir = tessel::test::scratch_path("tessel_gguf_ref");
  GgufMetadata m = gguf_sample_metadata();
  TokenizerConfig c = small_config();
  c.vocab.push_back("<|endoftext|>");
  c.added_tokens.push_back({int32_t(c.vocab.size() - 1), "<|endoftext|>", true});
  Tokenizer(c).to_gguf(m);
  const std::string file = (dir / "sample.gguf").string();
  save_gguf(file, m, gguf_sample_tensors());
  const GgufFile ours = GgufFile::open(file);
  const json theirs = read_with_javascript(file, dir);

  const json& meta = theirs.at("metadata");
  EXPECT_EQ(integer_text(meta.at("version").at("value")), "3");
  EXPECT_EQ(integer_text(meta.at("tensor_count").at("value")),
            std::to_string(ours.tensors().size()));
  EXPECT_EQ(integer_text(meta.at("kv_count").at("value")), std::to_string(ours.metadata().size()));
  EXPECT_EQ(meta.size(), ours.metadata().size() + 3);  // + version, tensor_count, kv_count
  for (const auto& [key, value] : ours.metadata().entries()) {
    ASSERT_TRUE(meta.contains(key)) << key;
    const json& entry = meta.at(key);
    EXPECT_EQ(entry.at("type").get<uint32_t>(), uint32_t(value.type)) << key;
    if (value.type == GgufType::Array) {
      EXPECT_EQ(entry.at("subType").get<uint32_t>(), uint32_t(value.elem)) << key;
    }
    expect_same(value, entry.at("value"), key);
  }
  const json& tensors = theirs.at("tensors");
  ASSERT_EQ(tensors.size(), ours.tensors().size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& t = ours.tensors()[i];
    EXPECT_EQ(tensors[i].at("name"), t.name);
    EXPECT_EQ(tensors[i].at("type").get<uint32_t>(), t.type) << t.name;
    EXPECT_EQ(tensors[i].at("offset").get<std::string>(), std::to_string(t.offset)) << t.name;
    ASSERT_EQ(tensors[i].at("dims").size(), t.dims.size()) << t.name;
    for (size_t d = 0; d < t.dims.size(); ++d)
      EXPECT_EQ(tensors[i].at("dims")[d].get<std::string>(), std::to_string(t.dims[d])) << t.name;
  }
  fs::remove_all(dir);
}

TEST(GgufReference, TesselReadsWhatJavaScriptWrote) {
  const fs::path dir = tessel::test::scratch_path("tessel_gguf_ref_js");
  const std::string file = (dir / "theirs.gguf").string(), out = (dir / "written.json").string();
  const std::string cmd = std::string(TESSEL_NODE) + " " + TESSEL_GGUF_WRITE_SCRIPT + " " +
                          TESSEL_GGUF_PACKAGE + " " + file + " > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  const json written = json::parse(in).at("metadata");
  const GgufFile ours = GgufFile::open(file);
  EXPECT_EQ(ours.version(), 3u);
  EXPECT_EQ(ours.alignment(), 64u);
  EXPECT_TRUE(ours.tensors().empty());
  ASSERT_EQ(ours.metadata().size(), written.size());
  for (const auto& [key, entry] : written.items()) {
    const GgufValue* value = ours.metadata().find(key);
    ASSERT_NE(value, nullptr) << key;
    EXPECT_EQ(uint32_t(value->type), entry.at("type").get<uint32_t>()) << key;
    if (value->type == GgufType::Array) {
      EXPECT_EQ(uint32_t(value->elem), entry.at("subType").get<uint32_t>()) << key;
    }
    expect_same(*value, entry.at("value"), key);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessel::io
