// SPDX-License-Identifier: Apache-2.0
// The serving cost model's mixture-of-experts terms (plan/serve_moe.h) on Mixtral's "tiny" preset
// (4 layers, hidden 192, 4 SwiGLU experts of 256, top-2): the experts' geometry serve_shape reads,
// the experts a rank holds under ep x tp, the share of them a step reads (k / E at one token), a
// decode step's memory traffic reading only the chosen experts, the ep all-gather's time, and the
// search offering `--ep` layouts only where every layer's expert count splits.
#include "tessel/plan/serve_moe.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tessel/models/family.h"
#include "tessel/plan/comm_cost.h"
#include "tessel/plan/serve_cost.h"
#include "tessel/plan/serve_search.h"

namespace tessel::plan {
namespace {

constexpr int64_t kLayers = 4, kHidden = 192, kWidth = 256, kExperts = 4;

Cluster four_chips() {
  return Cluster::parse(R"(
name = "four"
devices_per_node = 4
nodes = 1
[device]
kind = "test"
memory_bytes = 1000000000
memory_bandwidth = 1e9
[device.peak_flops]
f32 = 1e9
[links.intra_node]
bandwidth = 1e9
latency = 1e-6
)",
                        "four.toml");
}

ServeShape mixtral() {
  return serve_shape(*models::find_preset("mixtral:tiny"));
}

TEST(ServeMoe, ShapeCountsTheExpertsApartFromTheDenseBlocks) {
  const ServeShape s = mixtral();
  const ServeExperts& e = s.experts;
  ASSERT_TRUE(e.any());
  EXPECT_EQ(e.moe_layers, kLayers);
  EXPECT_EQ(e.top_k, 2);
  EXPECT_EQ(e.min_experts, kExperts);
  EXPECT_EQ(e.expert_width, kWidth);
  const int64_t per_expert = 3 * kHidden * kWidth;  // gate, up, down
  EXPECT_EQ(e.expert_params, kLayers * kExperts * per_expert);
  EXPECT_DOUBLE_EQ(e.active_params, double(kLayers * 2 * per_expert));
  EXPECT_EQ(e.column_params, kLayers * per_expert);
  EXPECT_EQ(e.whole_params, 0);
  // Dense matrices (attention and the router) are the rest of the blocks: no expert in them.
  EXPECT_LT(s.block_matrix_params, 4 * kHidden * kHidden + kExperts * kHidden + 1);
  EXPECT_GE(s.d_ff, kWidth);
  EXPECT_LE(double(s.layers * s.block_matrix_params + e.expert_params), double(s.parameter_count));
  EXPECT_FALSE(serve_shape(*models::find_preset("gpt2:tiny")).experts.any());
  EXPECT_GT(s.kernels_per_forward, 0);  // traced on meta, each token routed to k experts in turn
}

TEST(ServeMoe, GenerationTracesOnMeta) {
  // The routing has no values on meta; the trace still runs and holds the experts' rows.
  const models::ConfigPtr config = models::find_preset("mixtral:tiny");
  const ServeMemory one = trace_serve_memory(*config, 1, 7, 33);
  const ServeMemory three = trace_serve_memory(*config, 3, 7, 33);
  EXPECT_GT(one.prefill_bytes, 7.0 * 2 * kWidth * 4);  // at least one activation of the T k rows
  EXPECT_GT(three.prefill_bytes, one.prefill_bytes);
  EXPECT_GT(one.decode_bytes, 0);
}

TEST(ServeMoe, ExpertsPerRankAndTheShareAStepReads) {
  const ServeExperts e = mixtral().experts;
  EXPECT_DOUBLE_EQ(expert_params_per_rank(e, 1, 1), double(e.expert_params));
  EXPECT_DOUBLE_EQ(expert_params_per_rank(e, 2, 1), double(e.expert_params) / 2);
  EXPECT_DOUBLE_EQ(expert_params_per_rank(e, 2, 2), double(e.expert_params) / 4);
  EXPECT_DOUBLE_EQ(expert_params_per_rank(e, 4, 2), double(e.expert_params) / 8);
  // One token reads its k of E experts; many read them all.
  EXPECT_DOUBLE_EQ(expert_read_fraction(e, 1), 0.5);
  EXPECT_DOUBLE_EQ(expert_read_fraction(e, 2), 0.75);
  EXPECT_NEAR(expert_read_fraction(e, 64), 1.0, 1e-12);
  EXPECT_EQ(expert_split_refusal(e, 2), "");
  EXPECT_NE(expert_split_refusal(e, 3).find("4 experts, which --ep 3"), std::string::npos);
}

TEST(ServeMoe, DecodeReadsOnlyTheChosenExpertsAndEpGathersTheirRows) {
  const Cluster c = four_chips();
  const ServeShape moe = mixtral();
  ServeShape dense = moe;
  dense.experts = {};
  ServeWorkload w;
  w.phase = ServePhase::Decode;
  w.batch = 1;
  w.context = 9;
  w.kv_capacity = 16;
  const ServeLayout one;
  // At one token the step reads k / E of the experts above the dense model's bytes.
  const double extra =
      serve_cost(c, moe, one, w).memory_bytes - serve_cost(c, dense, one, w).memory_bytes;
  EXPECT_DOUBLE_EQ(extra, 0.5 * double(moe.experts.expert_params) * 4);
  // --ep 2: the rank holds half of the experts, and each MoE layer gathers the T k rows.
  ServeLayout ep2 = one;
  ep2.ep = 2;
  const ServeCost r = serve_cost(c, moe, ep2, w);
  const std::vector<int> ranks{0, 1};
  const double gather =
      collective_cost(c, Collective::AllGather, ranks, 2.0 * double(kHidden) * 4).seconds;
  EXPECT_NEAR(r.comm_seconds, double(kLayers) * gather, 1e-15);
  EXPECT_DOUBLE_EQ(r.weight_bytes_per_rank, serve_cost(c, moe, one, w).weight_bytes_per_rank -
                                                double(moe.experts.expert_params) / 2 * 4);
  EXPECT_EQ(ep2.describe(), "1d-ws ep=2 tp=1 pp=1 attn=heads");
}

TEST(ServeMoe, SearchOffersEpWhereTheExpertsSplit) {
  ServeRequest req;
  req.shape = mixtral();
  req.devices = 4;
  req.batches = {1};
  req.workload.kv_capacity = 16;
  req.workload.context = 9;
  req.workload.prompt = 7;
  const ServePlans plans = search_serve(four_chips(), req);
  bool ep2 = false, ep4 = false, ep2tp2 = false;
  for (const ServeRow& r : plans.decode) {
    ep2 = ep2 || (r.layout.ep == 2 && r.layout.tp == 1);
    ep4 = ep4 || (r.layout.ep == 4 && r.layout.tp == 1);
    ep2tp2 = ep2tp2 || (r.layout.ep == 2 && r.layout.tp == 2);
    EXPECT_EQ(r.layout.chips(), r.layout.ep * r.layout.tp * r.layout.pp);
  }
  EXPECT_TRUE(ep2 && ep4 && ep2tp2);
  req.shape = serve_shape(*models::find_preset("gpt2:tiny"));
  for (const ServeRow& r : search_serve(four_chips(), req).decode) EXPECT_EQ(r.layout.ep, 1);
}

}  // namespace
}  // namespace tessel::plan
