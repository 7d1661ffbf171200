// SPDX-License-Identifier: Apache-2.0
// gguf_blocks_view on a file opened for windows (what an expert-parallel rank uses): a rank's
// experts of a quantized stack are a view of exactly their bytes, and only a window around those
// bytes is mapped (the process's mappings of the file, read from /proc/self/maps, stay below two
// experts' bytes where the stack holds seven), so an --ep rank's address space holds its own
// experts and not the whole stack. The whole-file mapping gives the same bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "tessel/io/gguf.h"
#include "tessel/models/gguf_model.h"

namespace tessel::models {
namespace {

namespace fs = std::filesystem;

// Bytes of `path` mapped into this process now (the sum of its lines in /proc/self/maps).
int64_t mapped_bytes_of(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int64_t total = 0;
  while (std::getline(maps, line)) {
    if (line.size() < path.size() || line.compare(line.size() - path.size(), path.size(), path))
      continue;
    std::istringstream in(line);
    std::string range;
    in >> range;
    const size_t dash = range.find('-');
    total += int64_t(std::stoull(range.substr(dash + 1), nullptr, 16) -
                     std::stoull(range.substr(0, dash), nullptr, 16));
  }
  return total;
}

TEST(GgufBlocksView, AnExpertRangeOfAWindowedFileMapsOnlyItsBytes) {
  // A Q8_0 stack of 7 experts of 33 rows x 2048 columns: 34 bytes a block, 64 blocks a row,
  // 71,808 bytes an expert (more than a few pages, so the window's rounding stays small).
  const int64_t experts = 7, rows = 33, cols = 2048, row_bytes = cols / 32 * 34;
  const int64_t expert_bytes = rows * row_bytes;
  io::GgufTensorOut stack;
  stack.name = "blk.0.ffn_up_exps.weight";
  stack.dims = {uint64_t(cols), uint64_t(rows), uint64_t(experts)};
  stack.type = io::ggml::kQ8_0;
  stack.bytes.resize(size_t(experts * expert_bytes));
  for (size_t i = 0; i < stack.bytes.size(); ++i) stack.bytes[i] = uint8_t((i * 131 + 7) % 251);
  // Scales (the first two bytes of each 34-byte block) as small finite halves.
  for (size_t b = 0; b < stack.bytes.size(); b += 34) stack.bytes[b + 1] = 0x2c;
  const fs::path path = fs::temp_directory_path() /
                        ("tessel_gguf_blocks_view_" + std::to_string(::getpid()) + ".gguf");
  tessel::test::remove_at_exit(path);
  io::GgufMetadata metadata;
  metadata.set("general.architecture", io::GgufValue::of_string("llama"));
  io::save_gguf(path.string(), metadata, {stack});

  const auto windows = std::make_shared<const io::GgufFile>(
      io::GgufFile::open(path.string(), io::GgufMapping::Windows));
  const std::string real = fs::canonical(path).string();
  EXPECT_EQ(mapped_bytes_of(real), 0);
  {
    const Tensor mine = gguf_blocks_view(*windows, windows, stack.name, experts, 3, 1);
    ASSERT_EQ(mine.shape(), Shape({1, rows, row_bytes}));
    EXPECT_EQ(
        std::memcmp(mine.data_ptr(), stack.bytes.data() + 3 * expert_bytes, size_t(expert_bytes)),
        0);
    const int64_t mapped = mapped_bytes_of(real);
    EXPECT_GE(mapped, expert_bytes);
    EXPECT_LT(mapped, 2 * expert_bytes) << "the whole stack is " << experts * expert_bytes;
  }
  EXPECT_EQ(mapped_bytes_of(real), 0) << "the window outlived the last view of it";

  const auto whole = std::make_shared<const io::GgufFile>(io::GgufFile::open(path.string()));
  const Tensor same = gguf_blocks_view(*whole, whole, stack.name, experts, 3, 1);
  EXPECT_EQ(
      std::memcmp(same.data_ptr(), stack.bytes.data() + 3 * expert_bytes, size_t(expert_bytes)), 0);
}

}  // namespace
}  // namespace tessel::models
