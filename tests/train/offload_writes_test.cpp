// SPDX-License-Identifier: Apache-2.0
// What an offloaded step writes to NVMe (docs/MEMORY.md, "Access"): forward and backward only
// read the parameter chunks, so a parameter chunk is written once per step — after the update
// that changed it — however often it is evicted; evicting it after forward or backward drops
// the memory copy and keeps the NVMe one. With a host tier of exactly the optimizer's row, the
// update of each row pushes the row before it out, so every chunk the update writes (parameters
// and both moments) goes to NVMe exactly once per step: the step's NVMe bytes are those chunks
// and the gradient chunks' spills, nothing more. The step record's byte count is the chunks'
// write count, and the run stays bitwise the in-memory one.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "offload_test_util.h"
#include "tessel/train/trainer.h"

namespace tessel::train {
namespace {

using test::collect;
using test::kChunk;
using test::odd_config;
using test::offloaded;
using test::scratch;
namespace fs = std::filesystem;

constexpr int64_t kSteps = 7;

// Writes of every chunk to NVMe so far.
std::vector<int64_t> writes_of(const memory::ChunkManager& chunks) {
  std::vector<int64_t> out;
  for (int id = 0; id < chunks.num_chunks(); ++id) out.push_back(chunks.chunk(id).nvme_writes);
  return out;
}

void check_writes(const std::string& precision) {
  SCOPED_TRACE(precision);
  const auto dir = scratch("offload_writes_" + precision);
  fs::create_directories(dir / "nvme");
  TrainConfig plain = odd_config(dir, "run_plain", kSteps);
  plain.train.precision = precision;
  const size_t need = test::device_chunks_needed(plain);
  const size_t row = precision == "fp32" ? 4 : 5;  // the update's row: the smallest host tier
  TrainConfig off = plain;
  off.checkpoint.dir = (dir / "run_off").string();
  off = offloaded(off, need, row, (dir / "nvme").string());

  std::vector<StepRecord> a, b;
  Trainer in_memory(plain, "", collect(&a));
  in_memory.run();

  // Each step's writes per chunk, taken as the step's record is made.
  std::vector<std::vector<int64_t>> per_step;
  Trainer* chunked_ptr = nullptr;
  std::vector<int64_t> last;
  TrainerHooks hooks = collect(&b);
  hooks.on_step = [&](const StepRecord& r) {
    b.push_back(r);
    const std::vector<int64_t> now = writes_of(chunked_ptr->offload()->chunks());
    std::vector<int64_t> step(now.size());
    for (size_t i = 0; i < now.size(); ++i) step[i] = now[i] - last[i];
    per_step.push_back(step);
    last = now;
  };
  Trainer chunked(off, "", hooks);
  chunked_ptr = &chunked;
  const memory::ChunkManager& chunks = chunked.offload()->chunks();
  last = writes_of(chunks);  // start-up's writes: the chunks beyond the memory tiers
  const std::vector<int64_t> at_start = last;
  const int64_t n = chunks.num_chunks();
  ASSERT_GT(size_t(n), need + row) << "the budgets must leave chunks on NVMe";
  chunked.run();

  ASSERT_EQ(a.size(), size_t(kSteps));
  ASSERT_EQ(b.size(), size_t(kSteps));
  ASSERT_EQ(per_step.size(), size_t(kSteps));
  for (size_t s = 0; s < a.size(); ++s) {
    EXPECT_EQ(a[s].loss, b[s].loss) << "step " << s + 1;
    EXPECT_EQ(a[s].grad_norm, b[s].grad_norm) << "step " << s + 1;
  }
  std::map<std::string, int64_t> chunks_of;  // chunks per group
  for (int id = 0; id < n; ++id) ++chunks_of[chunks.chunk(id).group];
  for (size_t s = 0; s < per_step.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s + 1));
    std::map<std::string, int64_t> written;
    int64_t total = 0;
    for (int id = 0; id < n; ++id) {
      const std::string& group = chunks.chunk(id).group;
      written[group] += per_step[s][size_t(id)];
      total += per_step[s][size_t(id)];
      // The rule: a chunk the update writes is written to NVMe once after it, never again in
      // the step; a 16-bit copies' chunk likewise (the update rounds into it). In the first
      // step a chunk that start-up placed in a memory tier has no NVMe copy yet, so its first
      // eviction writes it once before its update. (The last row's update is written early in
      // the next step, when the forward pushes it out of the host tier.)
      if (group == kGradGroup) continue;
      if (s == 0) {
        const int64_t before_update = at_start[size_t(id)] == 0 ? 1 : 0;
        EXPECT_LE(per_step[s][size_t(id)], 1 + before_update) << group << " chunk " << id;
      } else {
        EXPECT_EQ(per_step[s][size_t(id)], 1) << group << " chunk " << id;
      }
    }
    // The step record's NVMe bytes are exactly the chunks written.
    EXPECT_EQ(b[s].offload_nvme_write_bytes, total * int64_t(kChunk));
    // From the second step on: parameters, copies and moments, one write per chunk, as the
    // update dirtied each once — the step's NVMe bytes beyond the gradients' spills.
    if (s > 0) {
      for (const char* g : {"param", "adam_m", "adam_v"}) EXPECT_EQ(written[g], chunks_of[g]) << g;
      EXPECT_EQ(written[kCopyGroup], chunks_of[kCopyGroup]);
      EXPECT_EQ(total - written[kGradGroup], chunks_of["param"] + chunks_of[kCopyGroup] +
                                                 chunks_of["adam_m"] + chunks_of["adam_v"]);
    }
    std::printf(
        "[ %s step %zu ] NVMe write %lld B (param %lld, param16 %lld, grad %lld, moments "
        "%lld chunks of %zu B), read %lld B\n",
        precision.c_str(), s + 1, static_cast<long long>(b[s].offload_nvme_write_bytes),
        static_cast<long long>(written["param"]), static_cast<long long>(written[kCopyGroup]),
        static_cast<long long>(written[kGradGroup]),
        static_cast<long long>(written["adam_m"] + written["adam_v"]), kChunk,
        static_cast<long long>(b[s].offload_nvme_read_bytes));
  }
  // Evicting an unchanged chunk (a parameter after forward or backward) wrote nothing.
  EXPECT_GT(chunks.stats().clean_evictions, 0);
  fs::remove_all(dir);
}

TEST(OffloadWrites, ForwardAndBackwardOnlyReadTheParameterChunksFp32) {
  check_writes("fp32");
}

TEST(OffloadWrites, ForwardAndBackwardOnlyReadTheParameterChunksBf16) {
  check_writes("bf16");
}

}  // namespace
}  // namespace tessel::train
