// SPDX-License-Identifier: Apache-2.0
// The planner's offload model on hand-made inputs: the chunk layout (odd tensor sizes, 64-byte
// places, the copies' own list), the start-up placement, a state that fits the device tier moving
// nothing, a host tier holding everything moving nothing to NVMe, MIN never reading more than LRU
// in the steady state of a loop, the trainer's refusals with the smallest budgets, a pipeline
// rank's recorded holds under dp (its replicas' copies among them), an expert-parallel rank's two
// axes of shards, the disk time (reads and writes share the disk). Against measured runs:
// tests/plan/offload_plan_check.py.
#include "tessel/plan/offload_model.h"

#include <gtest/gtest.h>

#include <string>

#include "tessel/core/error.h"

namespace tessel::plan {
namespace {

constexpr int64_t kChunk = 4096;

// `units` units of `per_unit` tensors of `numel` elements each; the first unit the root's.
OffloadInput input(int units, int per_unit, int64_t numel, DType compute = DType::F32) {
  OffloadInput in;
  in.compute = compute;
  for (int u = 0; u < units; ++u) {
    OffloadUnit unit{"u" + std::to_string(u), u == 0, {}};
    for (int t = 0; t < per_unit; ++t) {
      unit.tensors.push_back(in.tensors.size());
      in.tensors.push_back({unit.name + ".w" + std::to_string(t), numel, compute != DType::F32});
    }
    in.units.push_back(unit);
  }
  in.budgets.chunk_bytes = kChunk;
  return in;
}

std::string error_of(const OffloadInput& in) {
  try {
    predict_offload(in);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OffloadModel, LaysOutChunksPerKindInFirstUseOrder) {
  // 333 f32 elements: 1,332 bytes, a place of 1,344: three to a chunk of 4 KiB. Seven tensors:
  // three chunks in each of the four lists; bf16 copies (704-byte places) five to a chunk: two.
  OffloadInput in = input(1, 7, 333, DType::BF16);
  in.budgets.device_budget = 100 * kChunk;
  in.budgets.host_budget = 100 * kChunk;
  const OffloadPrediction p = predict_offload(in);
  ASSERT_EQ(p.groups.size(), 5u);
  EXPECT_EQ(p.groups[0].name, "param16");
  EXPECT_EQ(p.groups[0].chunks, 2);
  for (size_t g = 1; g < 5; ++g) EXPECT_EQ(p.groups[g].chunks, 3) << p.groups[g].name;
  EXPECT_EQ(p.chunks, 14);
  EXPECT_EQ(p.state_bytes, 7 * 333 * (4 * 4 + 2));
  EXPECT_EQ(p.chunk_bytes, kChunk);
  // One unit (the root's) holds its copies and gradients at once: 2 + 3; in f32 (an
  // evaluation's forward, counted as the trainer counts it) its parameters and gradients: 6.
  EXPECT_EQ(p.device_working_set, 6);
}

TEST(OffloadModel, PlacesDeviceFirstThenHostThenNvme) {
  // 4,000 bytes: one tensor a chunk, 24 chunks; the working set the root's unit and another,
  // each two parameter and two gradient chunks: 8.
  OffloadInput in = input(3, 2, 1000);
  in.budgets.device_budget = 8 * kChunk;
  in.budgets.host_budget = 7 * kChunk;
  in.budgets.nvme = true;
  const OffloadPrediction p = predict_offload(in);
  EXPECT_EQ(p.chunks, 24);
  int device = 0, host = 0, nvme = 0;
  for (const OffloadGroup& g : p.groups) {
    EXPECT_EQ(g.chunks, 6) << g.name;
    device += g.device;
    host += g.host;
    nvme += g.nvme;
  }
  EXPECT_EQ(p.device_working_set, 8);
  EXPECT_EQ(device, 8);
  EXPECT_EQ(host, 7);
  EXPECT_EQ(nvme, 9);
  EXPECT_EQ(p.start_nvme_write_bytes, 9 * kChunk);
  EXPECT_EQ(p.nvme_file_bytes, 24 * kChunk);
  // Reads the first step's gradients never need (they start as zeros in memory), so after it
  // every step reads and writes NVMe.
  for (size_t s = 1; s < p.steps.size(); ++s) {
    EXPECT_GT(p.steps[s].nvme_read_bytes, 0);
    EXPECT_GT(p.steps[s].nvme_write_bytes, 0);
    EXPECT_EQ(p.steps[s].nvme_read_bytes % kChunk, 0);
  }
}

TEST(OffloadModel, AStateThatFitsTheDeviceTierMovesOnlyForTheUpdate) {
  OffloadInput in = input(4, 3, 13);  // tiny tensors: every list one chunk
  in.budgets.device_budget = 64 * kChunk;
  in.budgets.host_budget = 64 * kChunk;
  const OffloadPrediction p = predict_offload(in);
  EXPECT_EQ(p.chunks, 4);
  for (const OffloadTraffic& t : p.steps) {
    EXPECT_EQ(t.nvme_read_bytes, 0);
    EXPECT_EQ(t.nvme_write_bytes, 0);
    EXPECT_EQ(t.evictions, 0);
  }
  // The norm and the update run in the host tier: the first step takes all four chunks there;
  // the moments stay, the next forward brings the parameters back and the next backward makes
  // its gradients in the device tier (they were freed), so each later step moves those two.
  EXPECT_EQ(p.steps[0].d2h_bytes, 4 * kChunk);
  EXPECT_EQ(p.steps[0].h2d_bytes, 0);
  EXPECT_EQ(p.steady().d2h_bytes, 2 * kChunk);
  EXPECT_EQ(p.steady().h2d_bytes, kChunk);
}

TEST(OffloadModel, AHostTierHoldingEverythingNeverTouchesNvme) {
  OffloadInput in = input(5, 2, 1000);
  in.budgets.device_budget = 8 * kChunk;
  in.budgets.host_budget = 40 * kChunk;
  const OffloadPrediction p = predict_offload(in, 5);
  for (const OffloadTraffic& t : p.steps) {
    EXPECT_EQ(t.nvme_read_bytes + t.nvme_write_bytes, 0);
    EXPECT_GT(t.h2d_bytes, 0);
  }
}

TEST(OffloadModel, MinReadsNoMoreThanLruOnceTraced) {
  // Step 1 evicts by LRU, later ones by MIN over the recorded step: on the same sequence from the
  // same start MIN can only read less, and from step 3 on the steps repeat.
  for (int64_t host : {4, 6, 9}) {
    OffloadInput in = input(7, 1, 1000);  // the root's unit and another: 4 chunks
    in.budgets.device_budget = 4 * kChunk;
    in.budgets.host_budget = host * kChunk;
    in.budgets.nvme = true;
    const OffloadPrediction p = predict_offload(in, 6);
    EXPECT_LE(p.steps[1].nvme_read_bytes, p.steps[0].nvme_read_bytes) << host;
    for (size_t s = 3; s < p.steps.size(); ++s) {
      EXPECT_EQ(p.steps[s].nvme_read_bytes, p.steps[2].nvme_read_bytes) << host;
      EXPECT_EQ(p.steps[s].nvme_write_bytes, p.steps[2].nvme_write_bytes) << host;
    }
  }
}

TEST(OffloadModel, RefusesBudgetsTheTrainerRefusesNamingTheSmallest) {
  OffloadInput in = input(3, 2, 1000);
  in.budgets.host_budget = 4 * kChunk;
  in.budgets.nvme = true;
  in.budgets.device_budget = 7 * kChunk;  // the root's unit and another: 4 + 4 chunks
  std::string e = error_of(in);
  EXPECT_NE(e.find("the smallest device budget that works is 32768 bytes"), std::string::npos) << e;
  in.budgets.device_budget = 8 * kChunk;
  EXPECT_EQ(error_of(in), "");
  in.budgets.host_budget = 3 * kChunk;
  e = error_of(in);
  EXPECT_NE(e.find("the smallest host budget that works is 16384 bytes"), std::string::npos) << e;
  in.budgets.host_budget = 20 * kChunk;
  in.budgets.nvme = false;  // 24 chunks: the host tier must hold them all
  e = error_of(in);
  EXPECT_NE(e.find("the smallest host budget that works is 98304 bytes"), std::string::npos) << e;
  in = input(1, 1, 1100);  // 4,400 bytes: no chunk of 4 KiB holds it
  in.budgets.device_budget = in.budgets.host_budget = 100 * kChunk;
  e = error_of(in);
  EXPECT_NE(e.find("memory.chunk_bytes must be at least 8192"), std::string::npos) << e;
}

TEST(OffloadModel, RefusesTensorsOutsideExactlyOneUnit) {
  OffloadInput in = input(2, 2, 100);
  in.budgets.device_budget = in.budgets.host_budget = 100 * kChunk;
  in.units[1].tensors.push_back(0);
  std::string e = error_of(in);
  EXPECT_NE(e.find("tensor 'u0.w0' is in two units (the second: 'u1')"), std::string::npos) << e;
  in.units[1].tensors.pop_back();
  in.units[0].tensors.pop_back();
  e = error_of(in);
  EXPECT_NE(e.find("tensor 'u0.w1' belongs to no unit"), std::string::npos) << e;
  in.units[0].tensors.push_back(9);
  e = error_of(in);
  EXPECT_NE(e.find("unit 'u0' names tensor 9 of 4"), std::string::npos) << e;
}

// Under dp at ZeRO-3 each rank holds a unit's bucket, padded to a multiple of dp, as shards:
// parameter, gradient and both moments a dp-th of it, the full gradient buffer whole (in chunks
// only when every bucket fits one); the working set is three gathers and three full buffers.
TEST(OffloadModel, LaysOutZero3ShardsPerUnit) {
  OffloadInput in = input(4, 1, 333);  // buckets of 333 padded to 336 at dp 4 (84 a shard)
  in.dp = 4;
  in.zero_stage = 3;
  in.budgets.device_budget = in.budgets.host_budget = 100 * kChunk;
  OffloadPrediction p = predict_offload(in);
  ASSERT_EQ(p.groups.size(), 5u);
  EXPECT_EQ(p.groups[1].name, "grad_bucket");
  EXPECT_EQ(p.groups[1].chunks, 2);  // buffers of 1,344 bytes, three to a chunk of 4 KiB
  for (size_t g : {0, 2, 3, 4}) EXPECT_EQ(p.groups[g].chunks, 1) << p.groups[g].name;
  EXPECT_EQ(p.state_bytes, 4 * (4 * 84 * 4 + 336 * 4));
  EXPECT_EQ(p.device_working_set, 3);  // one parameter chunk, both buffer chunks
  // Buckets of 1,100 elements (4,400 bytes) fit no chunk: the buffers stay plain memory.
  in = input(4, 1, 1100);
  in.dp = 2;
  in.zero_stage = 3;
  in.budgets.device_budget = in.budgets.host_budget = 100 * kChunk;
  p = predict_offload(in);
  EXPECT_EQ(p.groups.size(), 4u);
  // Shards of 550 floats, one to a chunk: four parameter chunks, at most three gathers at once.
  EXPECT_EQ(p.device_working_set, 3);
  for (const OffloadTraffic& t : p.steps) EXPECT_EQ(t.nvme_read_bytes + t.nvme_write_bytes, 0);
}

// ZeRO-1/2: DataParallel's buckets over the tensors in reverse order, cut at the bucket size;
// a row of chunks per bucket (stage 2: the full buffer, the rank's gradient shard; stage 1: the
// all-reduced buffer) and both moments' shards.
TEST(OffloadModel, LaysOutZero12BucketsInReverseOrder) {
  OffloadInput in = input(4, 1, 333);  // 1,332 bytes a tensor
  in.dp = 2;
  in.zero_stage = 2;
  in.bucket_bytes = 2700;  // two tensors a bucket: {w3, w2} and {w1, w0}, 666 elements each
  in.grad_order = {3, 2, 1, 0};
  in.budgets.device_budget = in.budgets.host_budget = 100 * kChunk;
  OffloadPrediction p = predict_offload(in);
  ASSERT_EQ(p.groups.size(), 4u);
  EXPECT_EQ(p.groups[0].name, "grad_bucket");
  EXPECT_EQ(p.groups[0].chunks, 2);  // buffers of 2,664 bytes (2,688 placed), one to a chunk
  for (size_t g : {1, 2, 3}) EXPECT_EQ(p.groups[g].chunks, 1) << p.groups[g].name;
  EXPECT_EQ(p.state_bytes, 2 * 2664 + 3 * 2 * 1332);  // shards of 333 floats
  EXPECT_EQ(p.device_working_set, 2);                 // both buffers
  for (const OffloadTraffic& t : p.steps) EXPECT_EQ(t.nvme_read_bytes + t.nvme_write_bytes, 0);
  in.zero_stage = 1;  // the all-reduced buffers are the gradients: no grad_bucket list
  p = predict_offload(in);
  ASSERT_EQ(p.groups.size(), 3u);
  EXPECT_EQ(p.groups[0].name, "grad");
  EXPECT_EQ(p.groups[0].chunks, 2);
  EXPECT_EQ(p.device_working_set, 2);
  // Tight tiers move chunks every step.
  in.budgets.device_budget = 2 * kChunk;
  in.budgets.host_budget = 3 * kChunk;
  in.budgets.nvme = true;
  p = predict_offload(in);
  EXPECT_GT(p.steady().nvme_read_bytes, 0);
  // Buckets of 8,000 bytes fit no chunk: plain memory, nothing held in the device tier, whose
  // budget must still hold one chunk (the chunk manager's check).
  in.bucket_bytes = 8000;
  in.budgets.device_budget = 0;
  std::string e = error_of(in);
  EXPECT_NE(e.find("holds no chunk of 4096 bytes: the smallest device budget that works is 4096"),
            std::string::npos)
      << e;
  in.budgets.device_budget = kChunk;
  EXPECT_EQ(predict_offload(in).device_working_set, 0);
  in.grad_order.pop_back();
  e = error_of(in);
  EXPECT_NE(e.find("the gradient order names 3 tensors of 4"), std::string::npos) << e;
  in.grad_order.push_back(0);
  // Mixed precision: the replicas' copies in a list of their own, first, held unit by unit on
  // top of the buffers (one unit's two chunks of 666 bf16 values beside the root's).
  in.compute = DType::BF16;
  for (OffloadTensor& t : in.tensors) t.copy = true;
  in.bucket_bytes = 2700;
  in.budgets.device_budget = in.budgets.host_budget = 100 * kChunk;
  in.budgets.nvme = false;
  p = predict_offload(in);
  ASSERT_EQ(p.groups.size(), 4u);
  EXPECT_EQ(p.groups[0].name, "param16");
  EXPECT_EQ(p.groups[0].chunks, 1);  // four copies of 666 bytes (704 placed)
  EXPECT_EQ(p.device_working_set, 2 + 1);
  in.compute = DType::F16;
  e = error_of(in);
  EXPECT_NE(e.find("ZeRO is modelled in f32 and bf16, not f16"), std::string::npos) << e;
}

// A pipeline rank's units run in its schedule's order; under dp it needs the holds recorded from
// the runtime's objects (below).
TEST(OffloadModel, PipelineRanksRunTheirActions) {
  OffloadInput in = input(3, 1, 1000);
  for (OffloadUnit& u : in.units) u.root = false;
  in.units[2].stage = 1;  // another rank's stage: never run here
  in.pipeline.ranks = 2;
  in.pipeline.stage_layers = {{0, 2}, {2, 4}};
  in.pipeline.microbatches = 2;
  for (int mb = 0; mb < 2; ++mb)
    in.pipeline.actions.push_back({PipelineActionKind::Forward, mb, 0});
  for (int mb = 0; mb < 2; ++mb)
    in.pipeline.actions.push_back({PipelineActionKind::Backward, mb, 0});
  in.budgets.device_budget = 4 * kChunk;
  in.budgets.host_budget = 8 * kChunk;
  in.budgets.nvme = true;
  OffloadPrediction p = predict_offload(in);
  EXPECT_EQ(p.device_working_set, 4);  // the first unit's two chunks with another's two
  EXPECT_GT(p.steady().nvme_read_bytes, 0);
  // Mixed precision: a unit's gradients complete only in its stage's last backward, so the
  // device tier holds every unit's copies and gradients at once: the copies of 2,000 bytes (2,048
  // placed) two to a chunk, a gradient chunk each.
  in.compute = DType::BF16;
  for (OffloadTensor& t : in.tensors) t.copy = true;
  in.budgets.device_budget = 8 * kChunk;
  p = predict_offload(in);
  EXPECT_EQ(p.device_working_set, 2 + 3);
  in.dp = 2;
  in.zero_stage = 3;
  const std::string e = error_of(in);
  EXPECT_NE(e.find("needs the holds its DataParallel and Zero3Parameters take"), std::string::npos)
      << e;
}

// A pipeline rank under dp replays the holds recorded from the runtime's objects step by step,
// the first step's apart (ZeRO-3's prefetch links are learnt during it); misuse is refused.
TEST(OffloadModel, PipelineRanksUnderDpReplayTheirRecordedHolds) {
  OffloadInput in = input(3, 1, 1000);
  for (OffloadUnit& u : in.units) u.root = false;
  in.pipeline.ranks = 2;
  in.pipeline.stage_layers = {{0, 4}, {4, 5}};
  in.dp = 2;
  in.zero_stage = 3;
  in.budgets.device_budget = in.budgets.host_budget = 100 * kChunk;
  // Step 1 gathers nothing; from step 2 on bucket 0 (the last unit, whose 2,000-byte parameter
  // shard has a chunk of its own; the first two units' share one) is gathered once.
  using H = ShardHoldEvent;
  in.recorded_holds = {{},
                       {{H::Hold, H::Param, 0, true, false}, {H::Release, H::Param, 0}},
                       {{H::Hold, H::Param, 0, true, false}, {H::Release, H::Param, 0}}};
  OffloadPrediction p = predict_offload(in, 4);
  ASSERT_EQ(p.steps.size(), 4u);
  EXPECT_EQ(p.steps[0].h2d_bytes, 0);  // the update then moves every parameter shard to the host
  for (size_t s = 1; s < 4; ++s) EXPECT_EQ(p.steps[s].h2d_bytes, kChunk) << "step " << s + 1;
  in.recorded_holds[1][0].bucket = 7;
  std::string e = error_of(in);
  EXPECT_NE(e.find("a recorded hold of bucket 7 of 3"), std::string::npos) << e;
  in.recorded_holds[1][0].bucket = 0;
  in.pipeline.ranks = 1;
  e = error_of(in);
  EXPECT_NE(e.find("recorded holds are read for a pipeline or expert-parallel rank under dp only"),
            std::string::npos)
      << e;
  // ZeRO-1/2's replica copies: the offload layer's unit spans, recorded among the holds. Three
  // units whose 3,000-byte copies take a chunk each: one process holds the root's with one other
  // (two), a pipeline rank every unit's at once (three); the 6,000-byte buffers stay plain memory.
  in = input(3, 1, 1500, DType::BF16);
  in.dp = 2;
  in.zero_stage = 2;
  in.grad_order = {2, 1, 0};
  in.bucket_bytes = 6000;  // a bucket per tensor
  in.budgets.device_budget = in.budgets.host_budget = 100 * kChunk;
  EXPECT_EQ(predict_offload(in).device_working_set, 2);
  for (OffloadUnit& u : in.units) u.root = false;
  in.pipeline.ranks = 2;
  in.pipeline.stage_layers = {{0, 4}, {4, 5}};
  const std::vector<ShardHoldEvent> spans = {
      {H::Hold, H::Copies, 0, true, false}, {H::Release, H::Copies, 0},
      {H::Hold, H::Copies, 2, true, false}, {H::Hold, H::Buffer, 0, true, true},
      {H::Release, H::Buffer, 0},           {H::Release, H::Copies, 2}};
  in.recorded_holds = {spans, spans};
  p = predict_offload(in, 3);
  EXPECT_EQ(p.device_working_set, 3);
  ASSERT_EQ(p.steps.size(), 3u);
  EXPECT_EQ(p.steps[1], p.steps[2]);  // later steps repeat the last recorded one
  in.recorded_holds[1][2].bucket = 5;
  e = error_of(in);
  EXPECT_NE(e.find("a recorded hold of unit 5's copies, of 3 units"), std::string::npos) << e;
  // A unit's copies where the rank has none (f32).
  in = input(3, 1, 1500);
  for (OffloadUnit& u : in.units) u.root = false;
  in.pipeline.ranks = 2;
  in.pipeline.stage_layers = {{0, 4}, {4, 5}};
  in.dp = 2;
  in.zero_stage = 2;
  in.bucket_bytes = 6000;
  in.budgets.device_budget = in.budgets.host_budget = 100 * kChunk;
  in.recorded_holds = {spans};
  e = error_of(in);
  EXPECT_NE(e.find("unit 0's 16-bit copies, which this rank's state does not have"),
            std::string::npos)
      << e;
}

// An expert-parallel rank: its experts' shards (over dp / ep ranks, one ZeRO-3 unit per MoE layer)
// after the dense ones (over dp), no full buffer in chunks, each axis's gathers counted on their
// own in the working set, and the step's holds recorded with the axis they belong to.
TEST(OffloadModel, ExpertParallelRanksLayOutTheirExpertsAfterTheDenseShards) {
  OffloadInput in = input(3, 1, 1000);  // dense shards of 250 floats at dp 4
  for (int layer = 0; layer < 2; ++layer) {
    in.units[size_t(layer) + 1].tensors.push_back(in.tensors.size());
    in.tensors.push_back({"e" + std::to_string(layer), 599, false, layer});  // 300 at dp / ep 2
  }
  in.dp = 4;
  in.ep = 2;
  in.zero_stage = 3;
  in.budgets.device_budget = in.budgets.host_budget = 100 * kChunk;
  std::string e = error_of(in);
  EXPECT_NE(e.find("an expert-parallel rank (ep 2) needs"), std::string::npos) << e;
  using H = ShardHoldEvent;
  // Every step gathers expert bucket 0 (the last MoE layer's unit) once.
  const std::vector<ShardHoldEvent> gather = {{H::Hold, H::Param, 0, true, false, true},
                                              {H::Release, H::Param, 0, false, false, true}};
  in.recorded_holds = {gather, gather};
  OffloadPrediction p = predict_offload(in, 4);
  ASSERT_EQ(p.groups.size(), 4u);  // no grad_bucket: the full buffers stay plain memory
  // Dense shards of 1,000 bytes (three to a chunk), the experts' of 1,200 in a chunk of their own.
  EXPECT_EQ(p.groups[0].chunks, 2);
  EXPECT_EQ(p.state_bytes, 4 * (3 * 1000 + 2 * 1200));
  EXPECT_EQ(p.device_working_set, 2);  // one parameter chunk per axis
  EXPECT_EQ(p.steps[0].h2d_bytes, 0);  // the update then moves every parameter shard to the host
  for (size_t s = 1; s < 4; ++s) EXPECT_EQ(p.steps[s].h2d_bytes, kChunk) << "step " << s + 1;
  in.recorded_holds[1][0].bucket = 2;
  e = error_of(in);
  EXPECT_NE(e.find("a recorded hold of expert bucket 2 of 2"), std::string::npos) << e;
  in.recorded_holds[1][0].bucket = 0;
  in.ep = 3;
  e = error_of(in);
  EXPECT_NE(e.find("ep 3 must divide dp 4"), std::string::npos) << e;
  // ZeRO-2: the experts' own buckets (here one, of 1,198 floats over 2 ranks: 2,396-byte gradient
  // and moments' shards) follow the dense ones (one of 3,000 floats over 4: 3,000 bytes each);
  // neither's full buffer is in chunks under ep.
  in.ep = 2;
  in.zero_stage = 2;
  in.bucket_bytes = 1 << 20;
  in.recorded_holds = {{{H::Hold, H::GradShard, 0, false, true, true},
                        {H::Release, H::GradShard, 0, false, false, true}}};
  p = predict_offload(in, 3);
  ASSERT_EQ(p.groups.size(), 3u);
  EXPECT_EQ(p.groups[0].name, "grad");
  EXPECT_EQ(p.groups[0].chunks, 2);
  EXPECT_EQ(p.state_bytes, 3 * (3000 + 2396));
  EXPECT_EQ(p.device_working_set, 0);
  in.tensors[3].expert_layer = -1;
  in.tensors[4].expert_layer = -1;
  e = error_of(in);
  EXPECT_NE(e.find("an expert-parallel rank (ep 2) needs its experts' tensors"), std::string::npos)
      << e;
}

TEST(OffloadModel, DiskTimeAddsReadsAndWrites) {
  OffloadTraffic t;
  t.nvme_read_bytes = 6'000'000'000;
  t.nvme_write_bytes = 2'000'000'000;
  EXPECT_DOUBLE_EQ(offload_io_seconds(t, 2e9, 1e9), 5.0);
  EXPECT_DOUBLE_EQ(offload_io_seconds(t, 6e9, 0.5e9), 5.0);
  EXPECT_THROW(offload_io_seconds(t, 0, 1e9), Error);
}

}  // namespace
}  // namespace tessel::plan
