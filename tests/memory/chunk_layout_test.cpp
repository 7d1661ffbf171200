// SPDX-License-Identifier: Apache-2.0
// Chunk layout: tensors of odd sizes packed in first-use order, one chunk list per group, never
// across a chunk boundary; each tensor a view of its chunk with its values bit for bit; the
// chunk state machine.
#include <gtest/gtest.h>

#include <map>

#include "common/error_text.h"
#include "memory_test_util.h"
#include "tessel/memory/chunk_manager.h"

namespace tessel::memory {
namespace {

MemoryConfig memory_only(size_t chunk_bytes, size_t device_chunks, size_t host_chunks) {
  MemoryConfig config;
  config.chunk_bytes = chunk_bytes;
  config.device_budget = device_chunks * chunk_bytes;
  config.host_budget = host_chunks * chunk_bytes;
  return config;
}

TEST(ChunkLayout, OddTensorsPackInFirstUseOrderAsViews) {
  const size_t cb = 4096;
  Generator gen(7);
  // f32 sizes chosen so several tensors would straddle a 4 KiB boundary if packed blindly.
  const std::vector<std::pair<int64_t, DType>> specs = {
      {7, DType::F32},  {13, DType::BF16}, {33, DType::F32}, {999, DType::F32},
      {13, DType::F16}, {333, DType::F32}, {7, DType::F64},  {1003, DType::F32},
      {33, DType::I32}, {777, DType::F32}, {13, DType::F32}, {1021, DType::F32}};
  std::vector<Tensor> tensors;
  std::vector<std::vector<unsigned char>> before;
  std::vector<std::string> groups;
  ChunkManager manager(memory_only(cb, 64, 64));
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor t = randn({specs[i].first}, DType::F32, &gen).to(specs[i].second);
    t.set_name("t" + std::to_string(i));
    groups.push_back(i % 3 == 2 ? "grad" : "param");
    manager.add(t, groups.back());
    tensors.push_back(t);
    before.push_back(test::bytes_of(t));
  }
  manager.seal();
  manager.check_accounting();

  std::map<int, std::string> group_of_chunk;
  std::map<int, size_t> end_of_chunk;
  int last_chunk_per_group[2] = {-1, -1};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    int c = manager.chunk_of(t);
    const Chunk& chunk = manager.chunk(c);
    size_t byte_offset = size_t(t.offset()) * t.element_size();
    EXPECT_EQ(byte_offset % 64, 0u) << t.name();
    EXPECT_LE(byte_offset + t.nbytes(), cb) << t.name() << " crosses its chunk's end";
    EXPECT_EQ(t.storage_ptr(), chunk.storage) << t.name() << " is not a view of its chunk";
    EXPECT_EQ(test::bytes_of(t), before[i]) << t.name() << " changed when laid out";
    // Within a group, tensors fill chunks in order: chunk ids never go back, offsets grow.
    int g = groups[i] == "grad";
    EXPECT_GE(c, last_chunk_per_group[g]);
    if (c == last_chunk_per_group[g]) {
      EXPECT_GE(byte_offset, end_of_chunk[c]);
    } else if (last_chunk_per_group[g] >= 0) {
      // A new chunk only when the tensor did not fit the group's previous one.
      size_t end = (end_of_chunk[last_chunk_per_group[g]] + 63) / 64 * 64;
      EXPECT_GT(end + t.nbytes(), cb) << t.name() << " left room behind";
      EXPECT_EQ(byte_offset, 0u);
    }
    last_chunk_per_group[g] = c;
    end_of_chunk[c] = byte_offset + t.nbytes();
    EXPECT_EQ(chunk.group, groups[i]);
    auto [it, fresh] = group_of_chunk.emplace(c, groups[i]);
    EXPECT_EQ(it->second, groups[i]) << "chunk " << c << " mixes groups";
  }
  // Chunk ids follow first use: the chunk of the first tensor comes first.
  EXPECT_EQ(manager.chunk_of(tensors[0]), 0);
  EXPECT_EQ(manager.chunk_of(tensors[2]), 1);  // the first grad
  EXPECT_GE(manager.num_chunks(), 6);

  // Writes through the tensor handle land in the chunk and survive moves.
  int c = manager.chunk_of(tensors[3]);
  manager.access(c);
  tensors[3].fill(1.5);
  manager.release(c);
  manager.move(c, Tier::Host);
  manager.move(c, Tier::Device);
  EXPECT_EQ(tensors[3].to_vector<float>(), std::vector<float>(999, 1.5f));
}

TEST(ChunkLayout, BadTensorsAreRefused) {
  ChunkManager manager(memory_only(4096, 4, 0));
  Tensor big = zeros({1025});  // 4100 bytes
  big.set_name("big");
  test::expect_error([&] { manager.add(big, "param"); },
                     {"big", "4100 bytes", "chunk_bytes must be at least 8192"});
  Tensor t = zeros({7});
  manager.add(t, "param");
  test::expect_error([&] { manager.add(t, "param"); }, {"registered twice"});
  manager.seal();
  test::expect_error([&] { manager.add(zeros({7}), "param"); }, {"sealed"});
  test::expect_error([&] { manager.chunk_of(zeros({7})); }, {"not in a chunk"});
}

TEST(ChunkState, LegalAndIllegalTransitions) {
  ChunkManager manager(memory_only(4096, 4, 0));
  Tensor a = ones({13});
  Tensor g = ones({33});
  manager.add(a, "param");
  manager.add(g, "grad");
  manager.seal();
  const int pa = manager.chunk_of(a), pg = manager.chunk_of(g);
  EXPECT_EQ(manager.chunk(pa).state, ChunkState::Hold);
  test::expect_error([&] { manager.release(pa); }, {"released while hold"});
  manager.access(pa);
  manager.access(pa);  // nested
  test::expect_error([&] { manager.free(pa); }, {"illegal state change compute -> free"});
  test::expect_error([&] { manager.release(pa, ChunkState::Free); },
                     {"illegal state change compute -> free"});
  manager.release(pa, ChunkState::HoldAfterForward);
  EXPECT_EQ(manager.chunk(pa).state, ChunkState::Compute);  // one access still open
  manager.release(pa, ChunkState::HoldAfterForward);
  EXPECT_EQ(manager.chunk(pa).state, ChunkState::HoldAfterForward);
  test::expect_error([&] { manager.move(pa, Tier::Nvme); }, {"nvme_dir is not set"});

  // A gradient chunk: backward writes it, the update consumes it, free drops it; the next
  // access starts from zeros.
  manager.access(pg);
  manager.release(pg, ChunkState::HoldAfterBackward);
  EXPECT_EQ(manager.chunk(pg).state, ChunkState::HoldAfterBackward);
  manager.free(pg);
  EXPECT_EQ(manager.chunk(pg).state, ChunkState::Free);
  EXPECT_EQ(manager.pool(Tier::Device).bytes_in_use(), 4096u);
  test::expect_error([&] { g.to_vector<float>(); }, {"released"});
  test::expect_error([&] { manager.release(pg); }, {"released while free"});
  test::expect_error([&] { manager.move(pg, Tier::Host); }, {"cannot move while free"});
  manager.access(pg);
  EXPECT_EQ(g.to_vector<float>(), std::vector<float>(33, 0.0f));
  manager.release(pg, ChunkState::HoldAfterBackward);
  manager.check_accounting();
  check_transition(0, ChunkState::Free, ChunkState::Free);
  test::expect_error([] { check_transition(3, ChunkState::Hold, ChunkState::HoldAfterForward); },
                     {"chunk 3", "hold -> hold_after_forward"});
}

TEST(ChunkLayout, TensorsKeepTheirValuesAfterTheManagerGoes) {
  Tensor a = arange(0, 33);
  {
    ChunkManager manager(memory_only(4096, 1, 1));
    manager.add(a, "param");
    manager.seal();
  }
  EXPECT_EQ(a.to_vector<float>()[32], 32.0f);
}

}  // namespace
}  // namespace tessel::memory
