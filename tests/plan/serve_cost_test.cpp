// SPDX-License-Identifier: Apache-2.0
// The serving cost model (plan/serve_cost.h) on a small hand-derived configuration: every term of
// a decode step's time and memory at tp 1 and tp 2, multi-query against multi-head KV memory,
// batch-sharded attention, pipeline stages; the geometry serve_shape reads from tessel's models;
// and the search's ranking under a latency target.
#include "tessel/plan/serve_cost.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "tessel/models/family.h"
#include "tessel/plan/cluster.h"
#include "tessel/plan/serve_search.h"

namespace tessel::plan {
namespace {

// Two chips on one node; round figures so every term can be written down: 1 GFLOP/s, 1 GB/s of
// memory and of link, 1 us per message, 1e6 bytes of memory.
Cluster small_cluster() {
  return Cluster::parse(R"(
name = "small"
devices_per_node = 2
nodes = 1
[device]
kind = "test"
memory_bytes = 1000000
memory_bandwidth = 1e9
[device.peak_flops]
f32 = 1e9
[links.intra_node]
bandwidth = 1e9
latency = 1e-6
)",
                        "small.toml");
}

// 2 blocks, d_model 8, 2 heads of 4, one KV head (multi-query), MLP 32 wide, vocabulary 16. A
// block multiplies with q 8x8, k and v 8x4 each, o 8x8 and the MLP's 8x32 twice: 704 weights;
// with the tied 16x8 embedding 1536 parameters.
ServeShape small_shape(int64_t kv_heads = 1) {
  ServeShape s;
  s.name = "small";
  s.layers = 2;
  s.d_model = 8;
  s.d_ff = 32;
  s.heads = 2;
  s.kv_heads = kv_heads;
  s.head_dim = 4;
  s.vocab = 16;
  s.max_positions = 64;
  s.block_matrix_params = 704;
  s.parameter_count = 1536;
  return s;
}

// Decode: 3 sequences with 9 tokens of context each, 16 tokens of cache held, all f32.
ServeWorkload decode3() {
  ServeWorkload w;
  w.phase = ServePhase::Decode;
  w.batch = 3;
  w.context = 9;
  w.kv_capacity = 16;
  return w;
}

TEST(ServeCost, DecodeOnOneChipByHand) {
  const ServeCost c = serve_cost(small_cluster(), small_shape(), {}, decode3());
  // FLOPs: blocks 2·3 rows·2 layers·704 = 8448; attention 4·(2·4)·(3 seqs·10 positions)·2 = 1920;
  // head 2·3·16·8 = 768.
  EXPECT_DOUBLE_EQ(c.flops, 8448 + 1920 + 768);
  EXPECT_DOUBLE_EQ(c.compute_seconds, 11136e-9);
  // Bytes: weights (2·704 + 16·8)·4 = 6144; KV of a token 2·2 layers·1 head·4·4 B = 64, read for
  // 3·9 tokens (1728) and written for 3 (192).
  EXPECT_DOUBLE_EQ(c.memory_bytes, 6144 + 1728 + 192);
  EXPECT_DOUBLE_EQ(c.memory_seconds, 8064e-9);
  EXPECT_DOUBLE_EQ(c.comm_seconds, 0);
  EXPECT_DOUBLE_EQ(c.seconds, 11136e-9);  // compute-bound
  EXPECT_DOUBLE_EQ(c.latency_per_token, c.seconds);
  EXPECT_DOUBLE_EQ(c.chip_seconds_per_token, 11136e-9 / 3);
  EXPECT_DOUBLE_EQ(c.mfu, 1.0);
  // Memory: 1536 f32 weights; 3 sequences x 16 tokens x 64 B; the workspace of the last decode
  // step (ServeMemory.FormulaByHand): 552 B a sequence, the MLP's statement's 480, the logits
  // twice and the id (the cache is read in place). (1e6 - 6144) / (1024 + 552) = 630 sequences
  // fit, to the byte (970 counting the cache alone).
  EXPECT_DOUBLE_EQ(c.weight_bytes_per_rank, 6144);
  EXPECT_DOUBLE_EQ(c.kv_bytes_per_token_per_rank, 64);
  EXPECT_DOUBLE_EQ(c.kv_bytes_per_rank, 3072);
  EXPECT_DOUBLE_EQ(c.workspace_bytes_per_rank, 1656);
  EXPECT_FALSE(c.workspace_traced);
  EXPECT_DOUBLE_EQ(c.peak_bytes_per_rank, 6144 + 3072 + 1656);
  EXPECT_EQ(c.max_batch, 630);
  EXPECT_TRUE(c.fits);
}

TEST(ServeCost, LoadStretchesTheChipsWorkNotTheLinks) {
  Cluster shared = small_cluster();
  shared.device.cpu_share = 0.25;  // calibrated while others held 3/4 of the cores
  const ServeCost c = serve_cost(shared, small_shape(), {}, decode3());
  EXPECT_DOUBLE_EQ(c.load_seconds, 11136e-9 * 3);
  EXPECT_DOUBLE_EQ(c.seconds, 11136e-9 * 4);
  ServeLayout tp2;
  tp2.tp = 2;
  const ServeCost t = serve_cost(shared, small_shape(), tp2, decode3());
  EXPECT_NEAR(t.seconds - t.comm_seconds, 4 * 5568e-9, 1e-15);
}

TEST(ServeCost, MultiHeadKvCostsMemoryAndBandwidth) {
  // Two KV heads instead of one: 128 B per token, half the sequences fit, twice the KV traffic.
  const ServeCost mqa = serve_cost(small_cluster(), small_shape(1), {}, decode3());
  const ServeCost mha = serve_cost(small_cluster(), small_shape(2), {}, decode3());
  EXPECT_DOUBLE_EQ(mha.kv_bytes_per_token_per_rank, 128);
  // 993856 / (2048 + 584): the MLP's statement with q, k, v 24 wide, (2·8 + 24 + 8 + 2·32 +
  // 2·8)·4 B, its logits twice and its id, 8 B (decode reads the cache in place, so the
  // context's width does not enter the workspace).
  EXPECT_EQ(mha.max_batch, 377);
  EXPECT_DOUBLE_EQ(mha.memory_bytes - mqa.memory_bytes, 1728 + 192);
}

TEST(ServeCost, TensorParallelDecodeByHand) {
  ServeLayout tp2;
  tp2.tp = 2;
  const ServeCost c = serve_cost(small_cluster(), small_shape(), tp2, decode3());
  EXPECT_DOUBLE_EQ(c.compute_seconds, 11136e-9 / 2);
  // Weights halve; the one KV head is replicated on both ranks, so its traffic does not.
  EXPECT_DOUBLE_EQ(c.memory_bytes, 3072 + 1728 + 192);
  EXPECT_DOUBLE_EQ(c.kv_bytes_per_token_per_rank, 64);
  // Per layer two ring all-reduces of 3 rows x 8 x 4 B = 96 B over 2 ranks:
  // 2·1 us + 2·(1/2)·96 B / 1 GB/s + 3/(1 GB/s)·(1/2)·96 B (the reduction) = 2.24 us; and the
  // head's f32 logits all-gathered, 3·16·4 = 192 B: 1 us + (1/2)·192 B / 1 GB/s = 1.096 us.
  EXPECT_NEAR(c.comm_seconds, 4 * 2.24e-6 + 1.096e-6, 1e-15);
  EXPECT_NEAR(c.seconds, 5568e-9 + 4 * 2.24e-6 + 1.096e-6, 1e-15);
  EXPECT_NEAR(c.chip_seconds_per_token, 2 * c.seconds / 3, 1e-18);
  EXPECT_DOUBLE_EQ(c.weight_bytes_per_rank, 3072);
}

TEST(ServeCost, BatchShardedAttentionSplitsAMultiQueryCache) {
  ServeLayout heads;
  heads.tp = 2;
  ServeLayout batch = heads;
  batch.attention = AttentionSharding::Batch;
  const ServeCost h = serve_cost(small_cluster(), small_shape(), heads, decode3());
  const ServeCost b = serve_cost(small_cluster(), small_shape(), batch, decode3());
  // Sharding the one KV head's cache over the sequences: each rank keeps 2 of the 3 sequences.
  EXPECT_DOUBLE_EQ(b.kv_bytes_per_rank, 2 * 16 * 64);
  EXPECT_DOUBLE_EQ(h.kv_bytes_per_rank, 3 * 16 * 64);
  // A layout tessel does not run: the cache alone limits the batch (the workspace is reported).
  EXPECT_EQ(b.max_batch, 2 * ((1000000 - 3072) / 1024));
  EXPECT_GT(b.workspace_bytes_per_rank, 0);
  EXPECT_FALSE(batch.runnable());
}

TEST(ServeCost, PipelineStagesHoldTheirLayers) {
  ServeLayout pp2;
  pp2.pp = 2;
  const ServeCost c = serve_cost(small_cluster(), small_shape(), pp2, decode3());
  // One block per stage: half the KV per token; two groups of ceil(3/2) = 2 sequences in flight.
  EXPECT_DOUBLE_EQ(c.kv_bytes_per_token_per_rank, 32);
  // A stage: 2 seqs through 1 layer, blocks 2·2·704 = 2816 FLOPs, attention 4·8·20 = 640; the
  // last stage adds the head, 2·2·16·8 = 512.
  EXPECT_DOUBLE_EQ(c.compute_seconds, (2 * (2816 + 640) + 512) * 1e-9);
  // One send of 2 rows of 8 f32 between the stages: 1 us + 64 B / 1 GB/s.
  EXPECT_DOUBLE_EQ(c.pipeline_seconds, 1e-6 + 64e-9);
}

TEST(ServeCost, Prefill) {
  ServeWorkload w;
  w.phase = ServePhase::Prefill;
  w.batch = 2;
  w.prompt = 5;
  w.kv_capacity = 16;
  const ServeCost c = serve_cost(small_cluster(), small_shape(), {}, w);
  // 10 rows through the blocks, 2·(5·6/2) = 30 causal pairs per layer and head group, the head
  // on the 2 last positions.
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 10 * 2 * 704 + 4.0 * 8 * 30 * 2 + 2.0 * 2 * 16 * 8);
  // Weights once, 10 tokens of KV written, none read.
  EXPECT_DOUBLE_EQ(c.memory_bytes, 6144 + 10 * 64);
  EXPECT_DOUBLE_EQ(c.chip_seconds_per_token, c.seconds / 10);
}

TEST(ServeCost, ShapeOfTesselModels) {
  const ServeShape g = serve_shape(*models::find_preset("gpt2:tiny"));
  const int64_t e = g.d_model;
  // GPT-2: c_attn 3E², c_proj E², c_fc and mlp.c_proj 4E² each.
  EXPECT_EQ(g.block_matrix_params, 12 * e * e);
  EXPECT_EQ(g.d_ff, 4 * e);
  EXPECT_EQ(g.kv_heads, g.heads);
  EXPECT_GT(g.kernels_per_forward, 0);
  const ServeShape l = serve_shape(*models::find_preset("llama:tiny"));
  EXPECT_LE(l.kv_heads, l.heads);
  EXPECT_EQ(l.kv_elements_per_token(), 2 * l.layers * l.kv_heads * l.head_dim);
}

TEST(ServeSearch, LatencyTargetPicksTheCheapestThatMeetsIt) {
  ServeRequest req;
  req.shape = small_shape();
  req.workload = decode3();
  req.devices = 2;
  req.batches = {1, 3, 8};
  ServePlans none = search_serve(small_cluster(), req);
  ASSERT_TRUE(none.best_decode);
  // Without a target the cheapest per token wins: one chip (two pay for the all-reduces), and
  // no row is cheaper.
  EXPECT_EQ(none.best_decode->layout.chips(), 1);
  EXPECT_GT(none.best_decode->batch, 1);      // a batch shares the weights' reads
  ASSERT_EQ(none.decode.size(), 3u + 4 * 3);  // 1 chip; 2: tp 2, pp 2, batch attn, wg; 3 batches
  for (const ServeRow& r : none.decode)
    EXPECT_LE(none.best_decode->cost.chip_seconds_per_token, r.cost.chip_seconds_per_token);
  // A target between the fastest row and that one excludes it.
  const double fastest = none.fastest_decode->cost.latency_per_token;
  req.decode_latency_target = fastest * 1.0001;
  ServePlans tight = search_serve(small_cluster(), req);
  ASSERT_TRUE(tight.best_decode);
  EXPECT_LE(tight.best_decode->cost.latency_per_token, req.decode_latency_target);
  req.decode_latency_target = fastest * 0.5;
  ServePlans impossible = search_serve(small_cluster(), req);
  EXPECT_FALSE(impossible.best_decode);
  EXPECT_DOUBLE_EQ(impossible.fastest_decode->cost.latency_per_token, fastest);
}

}  // namespace
}  // namespace tessel::plan

namespace tessel::plan {
namespace {

// The formula's terms for the small shape (plain MLP: its 512 matrix weights are two 8 x 32),
// 3 sequences, a 1-token prompt, 16 tokens of cache, f32, in elements a row: residual 8, the
// projected q, k, v 16 and y 8 held through the block; the MLP's statement adds the normalised
// input 8, up and activation 2·32, its output and the new residual 2·8 (120 a row); the
// attention's statement reads the cache in place (steps of fewer than four tokens a sequence go
// through the paged kernel), beside its block table and lengths (68 B for 3 sequences), which
// leaves the MLP's statement the largest; the logits 16 a sequence, twice in decode. Held
// throughout: the step's ids, 8 B a token, and in the prefill the index of each sequence's last
// row, 8 B a sequence (learned positions: their indices are a temporary of the embedding's
// statement).
TEST(ServeMemory, FormulaByHand) {
  const ServeMemory m = serve_memory_formula(small_shape(), 1, 3, 1, 16, 4, 4);
  EXPECT_DOUBLE_EQ(m.kv_bytes, 3072);
  EXPECT_DOUBLE_EQ(m.prefill_bytes, 3 * 120 * 4 + 3 * 8 + 3 * 8);  // the MLP's statement
  EXPECT_DOUBLE_EQ(m.decode_bytes, 3 * 120 * 4 + 3 * 16 * 4 + 3 * 8);
  EXPECT_DOUBLE_EQ(m.workspace(), 1656);
  // One sequence alike; tp 2 halves the heads' and the MLP's tensors (the one
  // KV head is whole on each rank) and adds the gathered logits beside the rank's columns.
  const ServeMemory one = serve_memory_formula(small_shape(), 1, 1, 1, 16, 4, 4);
  EXPECT_DOUBLE_EQ(one.decode_bytes, 120 * 4 + 16 * 4 + 8);
  const ServeMemory tp2 = serve_memory_formula(small_shape(), 2, 1, 1, 16, 4, 4);
  EXPECT_DOUBLE_EQ(tp2.decode_bytes, (8 + 12 + 4 + 8 + 2 * 16 + 2 * 8) * 4 + (8 + 16) * 4 + 8);
}

models::ConfigPtr tiny_llama(int64_t kv_heads, int64_t max_positions) {
  return models::parse_model_config(
      R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 260,
      "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 3,
      "num_attention_heads": 6, "num_key_value_heads": )" +
          std::to_string(kv_heads) + R"(, "max_position_embeddings": )" +
          std::to_string(max_positions) + R"(, "tie_word_embeddings": true})",
      "llama");
}

// A tessel model's serving memory is traced: a LLaMA (gated MLP, rotary positions) and a GPT-2
// (plain MLP, learned positions) at odd sizes, where a larger batch and context grow it, and the
// formula equals the trace to the byte: with the ids, the rotary model's positions and its
// cos/sin tables, made on first use (2,048 B here, 12.5% of the batch-1 workspace without them).
// The long-context LLaMA's tables grow twice while it decodes (256 -> 512 -> 1024 rows).
TEST(ServeMemory, TracedGrowsWithBatchAndContextAndTheFormulaEqualsIt) {
  const models::ConfigPtr gpt2 = models::parse_model_config(
      R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 260,
      "n_positions": 64, "n_embd": 48, "n_layer": 3, "n_head": 6})",
      "gpt2");
  struct Case {
    models::ConfigPtr config;
    const char* name;
    int64_t prompt, capacity;
  };
  const std::vector<Case> cases = {{tiny_llama(2, 64), "LLaMA 3 x 48, 2 KV heads", 7, 33},
                                   {tiny_llama(2, 64), "LLaMA 3 x 48, 2 KV heads", 13, 20},
                                   {tiny_llama(6, 64), "LLaMA 3 x 48, 6 KV heads", 7, 33},
                                   {tiny_llama(2, 1100), "LLaMA 3 x 48, 1100 positions", 7, 700},
                                   {gpt2, "GPT-2 3 x 48", 7, 33},
                                   {gpt2, "GPT-2 3 x 48", 13, 20}};
  for (const Case& c : cases) {
    const ServeShape shape = serve_shape(*c.config);
    for (int64_t b : {1, 3}) {
      const ServeMemory t = trace_serve_memory(*c.config, b, c.prompt, c.capacity);
      const ServeMemory f = serve_memory_formula(shape, 1, b, c.prompt, c.capacity, 4, 4);
      std::printf(
          "%s, batch %lld, prompt %lld, capacity %lld: workspace traced %.0f B (prefill %.0f, "
          "decode %.0f), formula %.0f (prefill %.0f, decode %.0f)\n",
          c.name, (long long)b, (long long)c.prompt, (long long)c.capacity, t.workspace(),
          t.prefill_bytes, t.decode_bytes, f.workspace(), f.prefill_bytes, f.decode_bytes);
      EXPECT_DOUBLE_EQ(t.kv_bytes, f.kv_bytes) << c.name << ", batch " << b;
      EXPECT_DOUBLE_EQ(f.prefill_bytes, t.prefill_bytes) << c.name << ", batch " << b;
      EXPECT_DOUBLE_EQ(f.decode_bytes, t.decode_bytes) << c.name << ", batch " << b;
    }
  }
  // Rotary tables: 2 x 64 positions x 4 frequencies x 4 B; none for learned positions.
  EXPECT_EQ(serve_shape(*tiny_llama(2, 64)).rotary_bytes_per_position, 32);
  EXPECT_EQ(serve_shape(*gpt2).rotary_bytes_per_position, 0);
  // A longer context takes more cache, not more workspace: decode steps read it in place.
  const models::ConfigPtr llama = tiny_llama(2, 64);
  const ServeMemory longer = trace_serve_memory(*llama, 3, 7, 33),
                    shorter = trace_serve_memory(*llama, 3, 7, 20);
  EXPECT_GT(longer.kv_bytes, shorter.kv_bytes);
  EXPECT_DOUBLE_EQ(longer.decode_bytes, shorter.decode_bytes);
}

}  // namespace
}  // namespace tessel::plan
