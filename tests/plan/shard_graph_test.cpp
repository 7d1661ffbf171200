// SPDX-License-Identifier: Apache-2.0
// The sharding ILP on a traced GPT-2 step: with no plan given, it rediscovers Megatron-LM's
// split (Colwise then Rowwise in the MLP, per-head qkv Colwise, attention per head, Rowwise
// output projection, vocab-split embedding and loss) on tp 2 and 4 when computing dominates,
// keeps the small products whole when the links are what costs; and how placements follow views.
#include "tessel/plan/shard_graph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "tessel/models/family.h"
#include "tessel/models/gpt2/gpt2_config.h"
#include "tessel/models/llama/llama_config.h"
#include "tessel/plan/shard_plan.h"
#include "tessel/plan/trace.h"

namespace tessel::plan {
namespace {

using sharding::Placement;

// One node of devices whose arithmetic is slow next to their links (1 GFLOP/s, 100 GB/s):
// splitting a product pays, so the ILP must find the split that communicates least.
Cluster slow_devices() {
  return Cluster::parse(R"(name = "slow-arithmetic"
devices_per_node = 4
nodes = 1
[device]
kind = "test"
memory_bytes = 1073741824
memory_bandwidth = 1e12
[device.peak_flops]
f32 = 1e9
[links.intra_node]
bandwidth = 100e9
latency = 1e-6
)",
                        "test cluster");
}

Cluster h100() {
  return Cluster::parse(R"(name = "h100"
devices_per_node = 8
nodes = 1
[device]
kind = "H100"
memory_bytes = 85899345920
memory_bandwidth = 3.35e12
[device.peak_flops]
f32 = 67e12
[links.intra_node]
bandwidth = 450e9
latency = 0.6e-6
)",
                        "test cluster");
}

models::ConfigPtr tiny_gpt2() {
  models::GPT2Config c;
  c.vocab_size = 257;
  c.n_positions = 32;
  c.n_embd = 24;
  c.n_layer = 2;
  c.n_head = 4;
  return std::make_shared<models::GPT2Config>(c);
}

std::string style_of(const ShardModel& m, const ShardSolution& s, const std::string& module,
                     const std::string& op) {
  for (size_t v = 0; v < m.groups.size(); ++v)
    if (m.groups[v].module == module && m.groups[v].op == op)
      return m.groups[v].strategies[size_t(s.choice[v])].style;
  return "<none>";
}

// The ILP's choice for one training step of `config` (3 x 13 tokens) at `tp`, on devices whose
// arithmetic is slow next to their links (so that splitting pays). The model points into the
// graph, so the three live together.
struct Solved {
  Graph g;
  ShardModel m;
  ShardSolution s;
};
std::unique_ptr<Solved> solve_slow(const models::ModelConfig& config, int tp,
                                   bool sequence_parallel = false,
                                   std::vector<std::string> vocab_parallel = {}) {
  auto out = std::make_unique<Solved>();
  TraceOptions t;
  t.batch = 3;
  t.seq = 13;
  out->g = trace_training_step(config, t);
  ShardGraphOptions o;
  o.tp = tp;
  o.sequence_parallel = sequence_parallel;
  o.vocab_parallel_modules = std::move(vocab_parallel);
  out->m = build_shard_model(out->g, slow_devices(), o);
  out->s = solve_shard_ilp(out->m.problem);
  return out;
}

class ShardGraphTp : public ::testing::TestWithParam<int> {};

TEST_P(ShardGraphTp, RediscoversMegatronForGpt2) {
  const int tp = GetParam();
  TraceOptions t;
  t.batch = 3;
  t.seq = 13;
  const Graph g = trace_training_step(*tiny_gpt2(), t);
  ShardGraphOptions o;
  o.tp = tp;
  o.vocab_parallel_modules = {"wte"};
  const ShardModel m = build_shard_model(g, slow_devices(), o);
  const ShardSolution s = solve_shard_ilp(m.problem);
  for (const char* block : {"h.0", "h.1"}) {
    const std::string b = block;
    EXPECT_EQ(style_of(m, s, b + ".attn.c_attn", "linear"), "Colwise") << b;
    EXPECT_EQ(style_of(m, s, b + ".attn", "attention"), "heads") << b;
    EXPECT_EQ(style_of(m, s, b + ".attn.c_proj", "linear"), "Rowwise") << b;
    EXPECT_EQ(style_of(m, s, b + ".mlp.c_fc", "linear"), "Colwise") << b;
    EXPECT_EQ(style_of(m, s, b + ".mlp.c_proj", "linear"), "Rowwise") << b;
    EXPECT_EQ(style_of(m, s, b + ".ln_1", "layer_norm"), "replicated") << b;
  }
  EXPECT_EQ(style_of(m, s, "", "linear"), "Colwise");  // the tied LM head
  EXPECT_EQ(style_of(m, s, "", "cross_entropy"), "vocab-parallel");
  const std::vector<ShardPlanRule> rules = shard_plan_rules(m, s);
  const std::vector<ShardPlanRule> want = {
      {"wte", "VocabParallel"},       {"h.*.attn.c_attn", "Colwise", 3, 6},
      {"h.*.attn.c_proj", "Rowwise"}, {"h.*.mlp.c_fc", "Colwise"},
      {"h.*.mlp.c_proj", "Rowwise"},  {"ln_f", "Sequence", 1, 1, true, true}};
  EXPECT_EQ(rules, want);
  // Megatron's four all-reduces per block (f and g, forward and backward, in attention and MLP)
  // and nothing else there: every other edge of the blocks is free.
  EXPECT_GT(s.communication_seconds, 0);
  EXPECT_LE(s.memory_bytes, m.problem.memory_budget);
}

// Under sequence parallelism the styles move activations otherwise (a Colwise product gathers its
// input from sequence pieces, a pending sum is reduce-scattered into them), and the ILP finds
// Megatron-LM's sequence-parallel plan, the family's built-in one (configs/gpt2-tp.json): the
// norms, the position embedding and the dropouts between the tensor-parallel regions on sequence
// pieces, the products split as without sp. The sequence dim of 13 tokens splits unevenly over 2
// and 4 ranks.
TEST_P(ShardGraphTp, UnderSequenceParallelismRediscoversMegatronsSequencePlanForGpt2) {
  const int tp = GetParam();
  const auto solved = solve_slow(*tiny_gpt2(), tp, true, {"wte"});
  const ShardModel& m = solved->m;
  const ShardSolution& s = solved->s;
  EXPECT_TRUE(m.sequence_parallel);
  for (const char* block : {"h.0", "h.1"}) {
    const std::string b = block;
    EXPECT_EQ(style_of(m, s, b + ".ln_1", "layer_norm"), "Sequence") << b;
    EXPECT_EQ(style_of(m, s, b + ".ln_2", "layer_norm"), "Sequence") << b;
    EXPECT_EQ(style_of(m, s, b + ".attn", "attention"), "heads") << b;
  }
  EXPECT_EQ(style_of(m, s, "wpe", "embedding"), "Sequence");
  EXPECT_EQ(style_of(m, s, "ln_f", "layer_norm"), "Sequence");
  std::vector<ShardPlanRule> rules = shard_plan_rules(m, s);
  std::vector<ShardPlanRule> want = {{"wte", "VocabParallel"},
                                     {"wpe", "Sequence"},
                                     {"drop", "Sequence"},
                                     {"h.*.ln_1", "Sequence"},
                                     {"h.*.attn.c_attn", "Colwise", 3, 6},
                                     {"h.*.attn.c_proj", "Rowwise"},
                                     {"h.*.attn.resid_dropout", "Sequence"},
                                     {"h.*.ln_2", "Sequence"},
                                     {"h.*.mlp.c_fc", "Colwise"},
                                     {"h.*.mlp.c_proj", "Rowwise"},
                                     {"h.*.mlp.dropout", "Sequence"},
                                     {"ln_f", "Sequence", 1, 1, true, true}};
  const auto by_pattern = [](const ShardPlanRule& a, const ShardPlanRule& b) {
    return a.pattern < b.pattern;
  };
  std::sort(rules.begin(), rules.end(), by_pattern);
  std::sort(want.begin(), want.end(), by_pattern);
  EXPECT_EQ(rules, want);
  // The same products without sp, whose activations between the regions are whole: more memory.
  const auto whole = solve_slow(*tiny_gpt2(), tp, false, {"wte"});
  EXPECT_LT(s.memory_bytes, whole->s.memory_bytes);
  EXPECT_GT(s.communication_seconds, 0);
}

INSTANTIATE_TEST_SUITE_P(Tp, ShardGraphTp, ::testing::Values(2, 4));

// A LLaMA with as many K/V heads as query heads (grouped-query attention stays whole), 2 blocks,
// 24 wide, 4 heads of 6, SwiGLU MLP of 36.
models::ConfigPtr tiny_llama(int64_t kv_heads = 4) {
  models::LlamaConfig c;
  c.vocab_size = 257;
  c.hidden = 24;
  c.intermediate_size = 36;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 6;
  c.max_position_embeddings = 32;
  return std::make_shared<models::LlamaConfig>(c);
}

TEST_P(ShardGraphTp, RediscoversMegatronForLlamasSwiGlu) {
  const auto solved = solve_slow(*tiny_llama(), GetParam());
  const ShardModel& m = solved->m;
  const ShardSolution& s = solved->s;
  for (const char* block : {"layers.0", "layers.1"}) {
    const std::string b = block;
    for (const char* proj : {"q_proj", "k_proj", "v_proj"})
      EXPECT_EQ(style_of(m, s, b + ".self_attn." + proj, "linear"), "Colwise") << b << " " << proj;
    EXPECT_EQ(style_of(m, s, b + ".self_attn.o_proj", "linear"), "Rowwise") << b;
    // Megatron's MLP: both SwiGLU inputs by columns, their product on the rank's features
    // (the op table's mul rule), the down projection by rows.
    EXPECT_EQ(style_of(m, s, b + ".mlp.gate_proj", "linear"), "Colwise") << b;
    EXPECT_EQ(style_of(m, s, b + ".mlp.up_proj", "linear"), "Colwise") << b;
    EXPECT_EQ(style_of(m, s, b + ".mlp", "mul"), "features") << b;
    EXPECT_EQ(style_of(m, s, b + ".mlp.down_proj", "linear"), "Rowwise") << b;
  }
  const std::vector<ShardPlanRule> rules = shard_plan_rules(m, s);
  auto has = [&](const std::string& pattern, const std::string& style) {
    for (const ShardPlanRule& r : rules)
      if (r.pattern == pattern && r.style == style) return true;
    return false;
  };
  EXPECT_TRUE(has("layers.*.mlp.gate_proj", "Colwise"));
  EXPECT_TRUE(has("layers.*.mlp.up_proj", "Colwise"));
  EXPECT_TRUE(has("layers.*.mlp.down_proj", "Rowwise"));
}

// LLaMA under sequence parallelism: the norms on sequence pieces (the op table's rms_norm rule),
// the products Megatron's; the final norm hands the untied head its pieces, which the Colwise head
// gathers itself.
TEST_P(ShardGraphTp, UnderSequenceParallelismLlamasNormsRunOnSequencePieces) {
  const auto solved = solve_slow(*tiny_llama(), GetParam(), true, {"lm_head"});
  const ShardModel& m = solved->m;
  const ShardSolution& s = solved->s;
  for (const char* block : {"layers.0", "layers.1"}) {
    const std::string b = block;
    EXPECT_EQ(style_of(m, s, b + ".input_layernorm", "rms_norm"), "Sequence") << b;
    EXPECT_EQ(style_of(m, s, b + ".post_attention_layernorm", "rms_norm"), "Sequence") << b;
    for (const char* proj : {"q_proj", "k_proj", "v_proj"})
      EXPECT_EQ(style_of(m, s, b + ".self_attn." + proj, "linear"), "Colwise") << b << " " << proj;
    EXPECT_EQ(style_of(m, s, b + ".self_attn.o_proj", "linear"), "Rowwise") << b;
    EXPECT_EQ(style_of(m, s, b + ".mlp.down_proj", "linear"), "Rowwise") << b;
  }
  EXPECT_EQ(style_of(m, s, "norm", "rms_norm"), "Sequence");
  EXPECT_EQ(style_of(m, s, "lm_head", "linear"), "Colwise");
  // The token embedding is either split by vocabulary (its sum reduce-scattered) or looks up the
  // rank's tokens only: either way the residual stream is in pieces from the start.
  const std::string embed = style_of(m, s, "embed_tokens", "embedding");
  EXPECT_TRUE(embed == "VocabParallel" || embed == "Sequence") << embed;
  const std::vector<ShardPlanRule> rules = shard_plan_rules(m, s);
  auto has = [&](const std::string& pattern, const std::string& style) {
    for (const ShardPlanRule& r : rules)
      if (r.pattern == pattern && r.style == style && !r.gather_output) return true;
    return false;
  };
  EXPECT_TRUE(has("layers.*.input_layernorm", "Sequence"));
  EXPECT_TRUE(has("layers.*.post_attention_layernorm", "Sequence"));
  EXPECT_TRUE(has("norm", "Sequence"));
  EXPECT_TRUE(has("lm_head", "Colwise"));
  EXPECT_TRUE(has("embed_tokens", embed));
}

// Grouped-query attention (4 query heads, 2 K/V heads): at tp 2 the heads split together, as
// Megatron splits them (q, k and v by columns, the output projection by rows); at tp 4 the two
// K/V heads cannot be shared out, so attention stays whole and its projections do not split.
TEST(ShardGraph, GroupedQueryAttentionSplitsByHeadsWhereTpDividesBothCounts) {
  for (int tp : {2, 4}) {
    const auto solved = solve_slow(*tiny_llama(2), tp);
    const ShardModel& m = solved->m;
    const ShardSolution& s = solved->s;
    for (const char* block : {"layers.0", "layers.1"}) {
      const std::string b = block;
      if (tp == 2) {
        for (const char* proj : {"q_proj", "k_proj", "v_proj"})
          EXPECT_EQ(style_of(m, s, b + ".self_attn." + proj, "linear"), "Colwise") << b << proj;
        EXPECT_EQ(style_of(m, s, b + ".self_attn", "attention"), "heads") << b;
        EXPECT_EQ(style_of(m, s, b + ".self_attn.o_proj", "linear"), "Rowwise") << b;
      } else {
        EXPECT_EQ(style_of(m, s, b + ".self_attn", "attention"), "replicated") << b;
        for (const char* proj : {"k_proj", "v_proj"})
          EXPECT_NE(style_of(m, s, b + ".self_attn." + proj, "linear"), "Colwise") << b << proj;
      }
      // The MLP splits either way.
      EXPECT_EQ(style_of(m, s, b + ".mlp.down_proj", "linear"), "Rowwise") << b << " tp " << tp;
    }
  }
}

TEST(ShardGraph, SmallProductsStayWholeWhenLinksCostMore) {
  // On an H100 a 24-wide layer's products take nanoseconds; an all-reduce a microsecond.
  TraceOptions t;
  t.batch = 3;
  t.seq = 13;
  const Graph g = trace_training_step(*tiny_gpt2(), t);
  ShardGraphOptions o;
  o.tp = 2;
  o.vocab_parallel_modules = {"wte"};
  const ShardModel m = build_shard_model(g, h100(), o);
  const ShardSolution s = solve_shard_ilp(m.problem);
  EXPECT_EQ(style_of(m, s, "h.0.mlp.c_fc", "linear"), "replicated");
  EXPECT_EQ(style_of(m, s, "h.1.attn.c_attn", "linear"), "replicated");
  const std::vector<ShardPlanRule> want = {{"wte", "VocabParallel"},
                                           {"ln_f", "Sequence", 1, 1, true, true}};
  EXPECT_EQ(shard_plan_rules(m, s), want);
}

TEST(ShardGraph, TightMemoryForcesTheSplitOnFastDevices) {
  TraceOptions t;
  t.batch = 3;
  t.seq = 13;
  const Graph g = trace_training_step(*tiny_gpt2(), t);
  ShardGraphOptions o;
  o.tp = 2;
  o.vocab_parallel_modules = {"wte"};
  const ShardModel free = build_shard_model(g, h100(), o);
  const ShardSolution loose = solve_shard_ilp(free.problem);
  // Just under what the replicated blocks need: something must be split.
  o.memory_budget = loose.memory_bytes * 0.9;
  const ShardModel tight = build_shard_model(g, h100(), o);
  const ShardSolution s = solve_shard_ilp(tight.problem);
  EXPECT_LE(s.memory_bytes, o.memory_budget);
  EXPECT_GT(s.objective, loose.objective);
  EXPECT_GT(shard_plan_rules(tight, s).size(), 1u);
}

TEST(ShardGraph, PlacementsFollowViews) {
  const auto S = [](int d) { return Placement::shard(d); };
  // [B, T, C] viewed as heads [B, T, H, D]: the feature split is a head split.
  EXPECT_EQ(view_placement(S(2), {3, 13, 24}, {3, 13, 4, 6}, 2), S(2));
  EXPECT_EQ(view_placement(S(2), {3, 13, 4, 6}, {3, 13, 24}, 4), S(2));
  // Logits [B, T, V] flattened to [B * T, V] for the loss.
  EXPECT_EQ(view_placement(S(2), {3, 13, 257}, {39, 257}, 2), S(1));
  // 33 features as 3 x 11 over 2 ranks: the pieces (17, 16) are not whole rows of 11.
  EXPECT_EQ(view_placement(S(1), {7, 33}, {7, 3, 11}, 2), std::nullopt);
  // Cutting the batch of [3, 13] differs from cutting the flat 39.
  EXPECT_EQ(view_placement(S(1), {3, 13}, {39}, 2), std::nullopt);
  EXPECT_EQ(view_placement(Placement::partial(), {3, 13}, {39}, 2), Placement::partial());
}

}  // namespace
}  // namespace tessel::plan
