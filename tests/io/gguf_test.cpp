// SPDX-License-Identifier: Apache-2.0
// GGUF: files tessel writes read back bit-exact (every metadata value type, nested arrays, tensors
// of odd sizes in F32 / F16 / BF16 / I64 and raw quantized blocks), tensors are zero-copy views of
// the mapping that outlive the file object, and a quantized tensor asked for as floats is a clear
// error.
#include "tessel/io/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/error_text.h"
#include "common/scratch_dir.h"
#include "gguf_mutate.h"
#include "gguf_sample.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& tag) {
  fs::path p = fs::temp_directory_path() /
               ("tessel_gguf_" + tag + "_" + std::to_string(::getpid()) + ".gguf");
  fs::remove(p);
  tessel::test::remove_at_exit(p);
  return p.string();
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

TEST(Gguf, EveryValueTypeReadsBackEqual) {
  const GgufMetadata m = gguf_sample_metadata();
  const std::vector<uint8_t> bytes = gguf_sample_bytes();
  const GgufHeader h = parse_gguf(bytes.data(), bytes.size(), "sample");
  EXPECT_EQ(h.version, 3u);
  ASSERT_EQ(h.metadata.size(), m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(h.metadata.entries()[i].first, m.entries()[i].first);
    EXPECT_TRUE(h.metadata.entries()[i].second == m.entries()[i].second) << m.entries()[i].first;
  }
  EXPECT_EQ(h.metadata.at("test.i8", "x").as_int("i8"), -100);
  EXPECT_EQ(h.metadata.at("test.u64", "x").uint, 18000000000000000000ull);
  EXPECT_EQ(h.metadata.at("test.f32", "x").real, double(0.1f));
  EXPECT_EQ(h.metadata.at("test.string", "x").as_string("s"), "h\xc3\xa9llo");
  const auto& nested = h.metadata.at("test.nested", "x").as_array("nested");
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[0].elem, GgufType::I32);
  EXPECT_EQ(nested[0].items[1].sint, -2);
  EXPECT_TRUE(nested[1].items.empty());
  // Written again from what was read, the bytes are the same.
  std::vector<GgufTensorOut> tensors = gguf_sample_tensors();
  EXPECT_EQ(serialize_gguf(h.metadata, tensors).size(), bytes.size());
}

TEST(Gguf, TensorsOfOddSizesReadBackBitExactAndZeroCopy) {
  const std::string path = temp_path("roundtrip");
  const std::vector<GgufTensorOut> tensors = gguf_sample_tensors();
  save_gguf(path, gguf_sample_metadata(), tensors);
  {
    // The file (written piece by piece from the tensors) is the serialized bytes.
    const std::vector<uint8_t> want = serialize_gguf(gguf_sample_metadata(), tensors);
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> got((std::istreambuf_iterator<char>(in)), {});
    EXPECT_TRUE(got == want);
  }
  Tensor a;
  {
    GgufFile f = GgufFile::open(path);
    ASSERT_EQ(f.tensors().size(), tensors.size());
    for (const GgufTensorOut& t : tensors) {
      const GgufTensorInfo& info = f.info(t.name);
      EXPECT_EQ(info.dims, t.dims) << t.name;
      EXPECT_EQ(info.type, t.type) << t.name;
      EXPECT_EQ(info.offset % 32, 0u) << t.name;
      auto raw = f.raw(t.name);
      ASSERT_EQ(raw.size(), t.size()) << t.name;
      EXPECT_EQ(std::memcmp(raw.data(), t.data(), t.size()), 0) << t.name;
      if (t.tensor.defined()) {
        Tensor loaded = f.load(t.name);
        EXPECT_TRUE(same_bytes(loaded, t.tensor)) << t.name;
        EXPECT_TRUE(f.is_zero_copy(loaded)) << t.name;
      }
    }
    EXPECT_EQ(f.info("a").shape(), Shape({7, 3}));
    EXPECT_EQ(f.info("q").shape(), Shape({2, 32}));
    EXPECT_EQ(ggml_type_name(f.info("q").type), "Q8_0");
    a = f.load("a");
    // Conversion on load: BF16 widened to F32 exactly.
    Tensor widened = f.load("bb", DType::F32);
    EXPECT_TRUE(same_bytes(widened, tensors[1].tensor.to(DType::F32)));
  }
  // The mapping outlives the GgufFile while a tensor views it.
  EXPECT_TRUE(same_bytes(a, tensors[0].tensor));
  fs::remove(path);
}

TEST(Gguf, VersionTwoReadsLikeThree) {
  // Version 2 has the same layout as 3 (64-bit counts and lengths); only the number differs.
  std::vector<uint8_t> bytes = gguf_sample_bytes();
  bytes[4] = 2;
  const GgufHeader h = parse_gguf(bytes.data(), bytes.size(), "v2");
  EXPECT_EQ(h.version, 2u);
  EXPECT_EQ(h.tensors.size(), gguf_sample_tensors().size());
  EXPECT_TRUE(h.metadata.at("test.nested", "v2") == gguf_sample_metadata().at("test.nested", ""));
}

TEST(Gguf, AlignmentFromMetadataIsHonoured) {
  GgufMetadata m;
  m.set("general.alignment", GgufValue::of_u32(64));
  std::vector<GgufTensorOut> t = {GgufTensorOut::from_tensor("x", randn({7})),
                                  GgufTensorOut::from_tensor("y", randn({13}))};
  const std::vector<uint8_t> bytes = serialize_gguf(m, t);
  const GgufHeader h = parse_gguf(bytes.data(), bytes.size(), "aligned");
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_start % 64, 0u);
  EXPECT_EQ(h.tensors[1].offset, 64u);
}

TEST(Gguf, QuantizedTensorAsFloatsIsNotYetReadable) {
  const std::string path = temp_path("quant");
  save_gguf(path, gguf_sample_metadata(), gguf_sample_tensors());
  GgufFile f = GgufFile::open(path);
  test::expect_error([&] { f.load("q"); },
                     {"tensor q has type Q8_0", "which this command does not read yet"});
  EXPECT_EQ(f.raw("q").size(), 68u);
  fs::remove(path);
}

TEST(Gguf, WriterRefusesWhatTheReaderWouldRefuse) {
  GgufTensorOut q;
  q.name = "q";
  q.dims = {33};
  q.type = ggml::kQ8_0;
  test::expect_error([&] { serialize_gguf({}, {q}); }, {"'q'", "33", "block size 32"});
  GgufTensorOut f = GgufTensorOut::from_tensor("f", randn({3}));
  f.dims = {4};
  test::expect_error([&] { serialize_gguf({}, {f}); }, {"'f'", "12 bytes", "need 16"});
  test::expect_error(
      [&] { serialize_gguf({}, {GgufTensorOut::from_tensor(std::string(65, 'n'), randn({1}))}); },
      {"tensor name", "64 bytes"});
}

TEST(Gguf, RandomMutationsParseOrThrowError) {
  const std::vector<uint8_t> valid = gguf_sample_bytes();
  GgufMutator mutator(7);
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> bytes = mutator.mutate(valid);
    try {
      parse_gguf(bytes.data(), bytes.size(), "fuzz");
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace tessel::io
