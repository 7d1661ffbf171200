// SPDX-License-Identifier: Apache-2.0
// GgufFile opened for windows (GgufMapping::Windows, what a --pp / --tp rank uses): the header is
// read with pread, growing the read while it goes on, and a tensor's bytes are mapped only when
// asked. The same file opened whole and for windows gives the same header and the same bytes of
// every tensor (whole, a byte range, pread), zero-copy loads included; a header longer than the
// first read (a vocabulary of 150k strings is a few MB) parses the same; a truncated file is the
// same Error either way.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "gguf_sample.h"
#include "tessel/io/gguf.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& tag) {
  fs::path p = fs::temp_directory_path() /
               ("tessel_gguf_windows_" + tag + "_" + std::to_string(::getpid()) + ".gguf");
  fs::remove(p);
  tessel::test::remove_at_exit(p);
  return p.string();
}

// The sample metadata plus an array of `strings` strings (a header of ~20 bytes per string).
GgufMetadata metadata_with(int64_t strings) {
  GgufMetadata m = gguf_sample_metadata();
  std::vector<std::string> vocab;
  for (int64_t i = 0; i < strings; ++i) vocab.push_back("token_" + std::to_string(i * 7919));
  m.set("tokenizer.ggml.tokens", GgufValue::of_strings(vocab));
  return m;
}

void expect_same(const GgufFile& whole, const GgufFile& windows) {
  EXPECT_EQ(windows.mapping(), GgufMapping::Windows);
  EXPECT_EQ(whole.mapping(), GgufMapping::Whole);
  EXPECT_EQ(windows.path(), whole.path());
  EXPECT_TRUE(windows.metadata().entries() == whole.metadata().entries());
  ASSERT_EQ(windows.tensors().size(), whole.tensors().size());
  for (const GgufTensorInfo& t : whole.tensors()) {
    const GgufTensorInfo& w = windows.info(t.name);
    EXPECT_EQ(w.offset, t.offset) << t.name;
    EXPECT_EQ(w.nbytes, t.nbytes) << t.name;
    const std::span<const uint8_t> want = whole.raw(t.name);
    const GgufBytes all = windows.map(t.name);
    ASSERT_EQ(all.bytes.size(), want.size()) << t.name;
    EXPECT_EQ(std::memcmp(all.bytes.data(), want.data(), want.size()), 0) << t.name;
    // An odd range inside the tensor: its window starts on a page, its bytes where asked.
    if (t.nbytes > 3) {
      const GgufBytes part = windows.map(t.name, 3, t.nbytes - 4);
      ASSERT_EQ(part.bytes.size(), t.nbytes - 4);
      EXPECT_EQ(std::memcmp(part.bytes.data(), want.data() + 3, t.nbytes - 4), 0) << t.name;
      std::vector<uint8_t> read(t.nbytes - 4);
      windows.read(t.name, 3, read.data(), read.size());
      EXPECT_EQ(std::memcmp(read.data(), want.data() + 3, read.size()), 0) << t.name;
    }
    const std::span<const uint8_t> raw = windows.raw(t.name);
    EXPECT_EQ(std::memcmp(raw.data(), want.data(), want.size()), 0) << t.name;
  }
  EXPECT_THROW(windows.map(whole.tensors().front().name, 0, whole.tensors().front().nbytes + 1),
               Error);
}

TEST(GgufWindows, SameHeaderAndBytesAsTheWholeMapping) {
  const std::string path = temp_path("small");
  save_gguf(path, gguf_sample_metadata(), gguf_sample_tensors());
  const GgufFile whole = GgufFile::open(path);
  const GgufFile windows = GgufFile::open(path, GgufMapping::Windows);
  expect_same(whole, windows);
  // A zero-copy load views its own window, which outlives the file.
  Tensor a;
  {
    const GgufFile w = GgufFile::open(path, GgufMapping::Windows);
    a = w.load("a");
    EXPECT_EQ(a.shape(), Shape({7, 3}));
  }
  const Tensor want = whole.load("a");
  EXPECT_EQ(std::memcmp(a.data_ptr(), want.data_ptr(), want.nbytes()), 0);
}

TEST(GgufWindows, AHeaderLongerThanTheFirstReadParsesTheSame) {
  const std::string path = temp_path("long");
  save_gguf(path, metadata_with(250000), gguf_sample_tensors());
  ASSERT_GT(fs::file_size(path), uint64_t(4) << 20) << "the header must pass two reads";
  expect_same(GgufFile::open(path), GgufFile::open(path, GgufMapping::Windows));
}

TEST(GgufWindows, ATruncatedFileIsTheSameErrorEitherWay) {
  const std::string path = temp_path("truncated");
  save_gguf(path, metadata_with(60000), gguf_sample_tensors());
  for (uint64_t keep : {uint64_t(100), uint64_t(1) << 20, fs::file_size(path) - 5}) {
    fs::resize_file(path, keep);
    std::string whole, windows;
    try {
      GgufFile::open(path);
    } catch (const Error& e) {
      whole = e.what();
    }
    try {
      GgufFile::open(path, GgufMapping::Windows);
    } catch (const Error& e) {
      windows = e.what();
    }
    EXPECT_FALSE(whole.empty()) << keep;
    EXPECT_EQ(windows, whole) << keep;
  }
}

}  // namespace
}  // namespace tessel::io
