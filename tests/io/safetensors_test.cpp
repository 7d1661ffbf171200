// SPDX-License-Identifier: Apache-2.0
// safetensors: a hand-assembled file read back, save -> load bit-exact for every dtype, zero-copy
// loads, conversion on load, sharded directories, and one clear error per kind of malformed file.
#include "tessel/io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/scratch_dir.h"
#include "safetensors_mutate.h"
#include "tessel/io/safetensors_dir.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& tag) {
  return tessel::test::scratch_path("tessel_st_" + tag).string();
}

std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    parse_safetensors(bytes.data(), bytes.size(), "test.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, ReadsAHandAssembledFile) {
  // Two f32 values and one bf16 value laid out exactly as the format specifies.
  std::vector<uint8_t> data(10);
  float a[2] = {1.5f, -2.0f};
  std::memcpy(data.data(), a, 8);
  uint16_t b = float_to_bf16(3.0f).bits;
  std::memcpy(data.data() + 8, &b, 2);
  std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[1,1],"data_offsets":[8,10]}})";
  std::string dir = temp_dir("hand");
  std::string path = dir + "/x.safetensors";
  auto bytes = make_file(header, data);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.load("a").to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  Tensor bf = f.load("b", DType::F32);
  EXPECT_EQ(bf.shape(), (Shape{1, 1}));
  EXPECT_EQ(bf.item(), 3.0);
  fs::remove_all(dir);
}

TEST(Safetensors, SaveLoadIsBitExactForEveryDtype) {
  Generator gen(5);
  NamedTensors tensors;
  for (DType d : kAllDTypes) {
    Tensor t = randn({7, 13}, DType::F64, &gen);
    if (!dtype_is_float(d)) t = full({7, 13}, -5.0, DType::F64);
    tensors.push_back({"t_" + std::string(dtype_name(d)), t.to(d)});
  }
  tensors.push_back({"scalar", full(Shape{}, 2.5, DType::F32)});
  tensors.push_back({"empty", zeros({0, 3}, DType::F16)});
  std::string dir = temp_dir("roundtrip");
  save_safetensors(dir + "/m.safetensors", tensors, {{"k", "v"}});
  SafetensorsFile f = SafetensorsFile::open(dir + "/m.safetensors");
  for (const auto& [name, t] : tensors) {
    Tensor back = f.load(name);
    ASSERT_EQ(back.shape(), t.shape()) << name;
    ASSERT_EQ(back.dtype(), t.dtype()) << name;
    EXPECT_EQ(0, std::memcmp(back.data_ptr(), t.data_ptr(), t.nbytes())) << name;
  }
  // Saving what was loaded reproduces the file byte for byte.
  NamedTensors again;
  for (const std::string& name : f.names()) again.push_back({name, f.load(name)});
  auto first = serialize_safetensors(tensors, {{"k", "v"}});
  auto second = serialize_safetensors(again, {{"k", "v"}});
  EXPECT_EQ(first, second);
  // Header padded so the data starts 8-byte aligned, tensors ordered by alignment then name.
  uint64_t n = 0;
  std::memcpy(&n, first.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  fs::remove_all(dir);
}

TEST(Safetensors, LoadsZeroCopyAndConverts) {
  std::string dir = temp_dir("zc");
  Tensor w = randn({33, 7});
  save_safetensors(dir + "/w.safetensors", {{"w", w}, {"h", w.to(DType::F16)}});
  Tensor view;
  {
    SafetensorsFile f = SafetensorsFile::open(dir + "/w.safetensors");
    view = f.load("w");
    EXPECT_TRUE(f.is_zero_copy(view));
    Tensor converted = f.load("h", DType::F32);
    EXPECT_FALSE(f.is_zero_copy(converted));
    EXPECT_EQ(converted.to_vector<float>(), w.to(DType::F16).to(DType::F32).to_vector<float>());
    EXPECT_THROW(f.load("w", DType::I32), Error);
  }
  // The mapping outlives the SafetensorsFile object while a tensor views it; writes stay private.
  EXPECT_EQ(view.to_vector<float>(), w.to_vector<float>());
  view.fill(0);
  SafetensorsFile again = SafetensorsFile::open(dir + "/w.safetensors");
  EXPECT_EQ(again.load("w").to_vector<float>(), w.to_vector<float>());
  fs::remove_all(dir);
}

TEST(Safetensors, ShardedDirectoryRoundTrip) {
  std::string dir = temp_dir("sharded");
  NamedTensors tensors;
  for (int i = 0; i < 5; ++i)
    tensors.push_back({"layer." + std::to_string(i) + ".weight", randn({13, 7})});
  save_safetensors_dir(dir, tensors, 13 * 7 * 4 * 2);  // two tensors per shard -> 3 shards
  EXPECT_TRUE(fs::exists(fs::path(dir) / kSafetensorsIndexName));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "model-00003-of-00003.safetensors"));
  SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::open(dir);
  EXPECT_EQ(ckpt.files().size(), 3u);
  for (const auto& [name, t] : tensors)
    EXPECT_EQ(ckpt.load(name).to_vector<float>(), t.to_vector<float>());
  // Re-saving into one file replaces the shards' index.
  save_safetensors_dir(dir, tensors);
  EXPECT_FALSE(fs::exists(fs::path(dir) / kSafetensorsIndexName));
  EXPECT_EQ(SafetensorsCheckpoint::open(dir).files().size(), 1u);
  // An index naming a tensor its shard lacks is refused.
  save_safetensors_dir(dir, tensors, 13 * 7 * 4 * 2);
  std::ofstream(fs::path(dir) / kSafetensorsIndexName)
      << R"({"weight_map":{"ghost":"model-00001-of-00003.safetensors"}})";
  try {
    SafetensorsCheckpoint::open(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'ghost'"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

struct Malformed {
  const char* what;
  std::function<std::vector<uint8_t>()> make;
  const char* expect;
};

TEST(Safetensors, MalformedFilesGiveClearErrors) {
  const std::vector<uint8_t> eight(8, 0), four(4, 0);
  std::vector<Malformed> cases = {
      {"too short",
       [] {
         return std::vector<uint8_t>{1, 2, 3};
       },
       "too short"},
      {"header past end",
       [&] {
         auto f = make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", four);
         f[0] = 200;
         return f;
       },
       "runs past the end"},
      {"header too large",
       [&] {
         auto f = make_file("{}", {});
         f[4] = 1;
         return f;
       },
       "exceeds the limit"},
      {"truncated data",
       [&] { return make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four); },
       "outside the 4-byte data buffer"},
      {"not json", [&] { return make_file("{not json}", {}); }, "not valid JSON"},
      {"not an object", [&] { return make_file("[1,2]", {}); }, "starting with '{'"},
      {"unknown dtype",
       [&] { return make_file(R"({"a":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", four); },
       "unknown dtype 'F12'"},
      {"shape/bytes mismatch",
       [&] {
         return make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight);
       },
       "needs 12 bytes"},
      {"overlap",
       [&] {
         return make_file(
             R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
             eight);
       },
       "overlaps"},
      {"hole",
       [&] {
         return make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight);
       },
       "hole"},
      {"trailing bytes",
       [&] {
         return make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight);
       },
       "cover 4"},
      {"duplicate name",
       [&] {
         return make_file(
             R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
             eight);
       },
       "appears twice"},
      {"negative dim",
       [&] {
         return make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four);
       },
       "non-negative"},
      {"overflowing shape",
       [&] {
         return make_file(
             R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", four);
       },
       "overflows"},
      {"end before begin",
       [&] { return make_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", four); },
       "end before begin"},
      {"metadata not strings", [&] { return make_file(R"({"__metadata__":{"n":1}})", {}); },
       "must be a string"},
      {"extra key",
       [&] {
         return make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", four);
       },
       "unknown key 'x'"},
  };
  for (const Malformed& c : cases) {
    std::string err = parse_error(c.make());
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": got '" << err << "'";
    EXPECT_NE(err.find("test.safetensors"), std::string::npos) << c.what << ": " << err;
  }
  EXPECT_EQ(parse_error(make_file("{}", {})), "");  // an empty file with no tensors is valid
}

// Thousands of random mutations of a valid file: every one parses or throws Error, none crashes.
// tests/io/CMakeLists builds the same loop under AddressSanitizer (safetensors_fuzz_asan).
TEST(Safetensors, RandomMutationsNeverCrash) {
  NamedTensors tensors = {{"a", randn({7, 3})},
                          {"bb", randn({13}).to(DType::BF16)},
                          {"c", arange(0, 5, 1, DType::I64)}};
  std::vector<uint8_t> valid = serialize_safetensors(tensors, {{"format", "pt"}});
  SafetensorsMutator mutator(99);
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    std::vector<uint8_t> f = mutator.mutate(valid);
    try {
      auto h = parse_safetensors(f.data(), f.size(), "fuzz");
      for (const auto& e : h.entries) ASSERT_LE(h.data_start + e.end, f.size());
      ++accepted;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(accepted + rejected, 5000);
}

}  // namespace
}  // namespace tessel::io
