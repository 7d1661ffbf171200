// SPDX-License-Identifier: Apache-2.0
// Construction without materialisation: a model built under nn::init::DeferInit and filled from
// its recipes equals build_random from the same seed bit for bit, whole and in every kind of local
// share a rank can hold (tensor-parallel pieces with fused blocks and vocabulary padding, ZeRO flat
// ranges cut through rows and through pieces); the generator ends at the same offset; a missing
// recipe and a region outside the tensor are refused.
#include "tessel/train/materialize.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>

#include "tessel/models/gpt2/gpt2_config.h"
#include "tessel/models/llama/llama_config.h"
#include "tessel/sharding/shard_layout.h"

namespace tessel::train {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == DType::F32 && b.dtype() == DType::F32 &&
         std::memcmp(a.data<float>(), b.data<float>(), size_t(a.numel()) * sizeof(float)) == 0;
}

models::GPT2Config odd_gpt2() {
  models::GPT2Config c;
  c.vocab_size = 37;
  c.n_positions = 13;
  c.n_embd = 12;
  c.n_head = 3;
  c.n_layer = 2;
  c.n_inner = 7;
  return c;
}

models::LlamaConfig odd_llama() {
  models::LlamaConfig c = models::LlamaConfig::preset("tiny");
  c.vocab_size = 33;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

struct Deferred {
  std::shared_ptr<models::CausalLM> model;
  std::shared_ptr<const ParameterInits> inits;
  uint64_t offset_after = 0;
};

Deferred build_deferred(const models::ModelConfig& config, uint64_t seed) {
  Generator g(seed);
  nn::init::InitRecord record;
  Deferred d;
  {
    nn::init::DeferInit defer(record);
    d.model = config.build_random(g);
  }
  d.inits = std::make_shared<const ParameterInits>(parameter_inits(*d.model, record));
  d.offset_after = g.offset();
  return d;
}

// Every parameter filled whole from the recipes equals the randomly built one.
void expect_whole_equal(const models::ModelConfig& config) {
  Generator g(11);
  auto reference = config.build_random(g);
  Deferred d = build_deferred(config, 11);
  EXPECT_EQ(d.offset_after, g.offset()) << "the generator must end where build_random leaves it";
  const RegionSource source = init_region_source(d.inits);
  const auto ref = reference->named_parameters();
  const auto got = d.model->named_parameters();
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const Tensor& t = got[i].second;
    t.storage().materialize();  // shape-only until the rank that holds it allocates it
    fill_placed(source, got[i].first, sharding::LocalLayout::whole(t.shape()), t.shape(), 0,
                t.numel(), t.detach().flatten());
    EXPECT_TRUE(same_bits(ref[i].second, t)) << got[i].first;
  }
}

TEST(Materialize, WholeModelsEqualBuildRandom) {
  expect_whole_equal(odd_gpt2());
  expect_whole_equal(odd_llama());
}

// Tensor-parallel pieces and ZeRO ranges of them: what fill_placed computes equals the same cut
// of the randomly built parameter.
TEST(Materialize, PiecesAndRangesEqualTheirCutOfTheWhole) {
  const models::GPT2Config config = odd_gpt2();
  Generator g(5);
  auto reference = config.build_random(g);
  Deferred d = build_deferred(config, 5);
  const RegionSource source = init_region_source(d.inits);
  struct Case {
    std::string name;
    sharding::ShardLayout spec;
  };
  const std::vector<Case> cases = {
      // q, k, v blocks split per head (unit 4 rows) over 3 ranks.
      {"h.0.attn.c_attn.weight", {0, 36, 0, 3, 4, false}},
      {"h.1.attn.c_attn.bias", {0, 36, 0, 3, 4, false}},
      // Rowwise: columns, uneven (7 over 3 ranks: 3, 2, 2).
      {"h.1.mlp.c_proj.weight", {1, 7, 0, 1, 1, false}},
      // The vocabulary padded from 37 to 39 rows: the last rank's piece ends in zero rows.
      {"wte.weight", {0, 37, 39, 1, 1, false}},
  };
  for (const Case& c : cases) {
    const Tensor whole = reference->find(c.name);
    for (int rank = 0; rank < 3; ++rank) {
      const Tensor want = sharding::shard_tensor(whole, c.spec, 3, rank);
      const sharding::LocalLayout placement =
          sharding::LocalLayout::of(c.spec, want.shape(), 3, rank);
      Tensor got = full(want.shape(), 7.0);  // garbage that must be overwritten, padding included
      fill_placed(source, c.name, placement, want.shape(), 0, want.numel(), got.flatten());
      EXPECT_TRUE(same_bits(want, got)) << c.name << " rank " << rank;
      // ZeRO-3 blocks of the piece: flat ranges cut through rows and segments.
      const int64_t n = want.numel();
      for (int64_t part = 0; part < 4; ++part) {
        const int64_t begin = n * part / 4, end = n * (part + 1) / 4;
        Tensor block = full({end - begin}, 7.0);
        fill_placed(source, c.name, placement, want.shape(), begin, end, block);
        EXPECT_TRUE(same_bits(want.flatten().narrow(0, begin, end - begin).clone(), block))
            << c.name << " rank " << rank << " elements " << begin << ".." << end;
      }
    }
  }
}

TEST(Materialize, DeferredModelTouchesNoParameterPage) {
  // 2 M parameters (8 MB) built deferred: shape-only, neither allocated nor written.
  models::GPT2Config c = odd_gpt2();
  c.vocab_size = 20011;
  c.n_embd = 96;
  c.n_head = 3;
  c.n_layer = 1;
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  Deferred d = build_deferred(c, 3);
  getrusage(RUSAGE_SELF, &after);
  // ru_minflt counts pages first touched; writing 8 MB would fault ~2000 4-KiB pages.
  EXPECT_LT(after.ru_minflt - before.ru_minflt, 500) << "a deferred build wrote its parameters";
  EXPECT_EQ(d.model->named_parameters().size(), d.inits->size());
  // Not even address space: every parameter's storage is released until a rank materialises it
  // (the same allocator count before and after: nothing was allocated).
  for (const auto& [name, p] : d.model->named_parameters())
    EXPECT_FALSE(p.storage().is_materialized()) << name;
  const size_t in_use = cpu_allocator().bytes_in_use();
  Deferred again = build_deferred(c, 3);
  EXPECT_LT(cpu_allocator().bytes_in_use() - in_use, size_t(1) << 20)
      << "a deferred build allocated its parameters";
  // A model built for a checkpoint (empty, no recipes) under a DeferInit is shape-only as well,
  // and materialising one parameter allocates exactly its bytes.
  nn::init::InitRecord unused;
  std::shared_ptr<models::CausalLM> empty_model;
  {
    nn::init::DeferInit defer(unused);
    empty_model = c.build_empty(nullptr);
  }
  for (const auto& [name, p] : empty_model->named_parameters())
    EXPECT_FALSE(p.storage().is_materialized()) << name;
  const Tensor wte = empty_model->find("wte.weight");
  const size_t before_wte = cpu_allocator().bytes_in_use();
  wte.storage().materialize();
  EXPECT_EQ(cpu_allocator().bytes_in_use() - before_wte, wte.nbytes());
}

TEST(Materialize, RefusesUnknownTensorsAndRegionsOutside) {
  Deferred d = build_deferred(odd_gpt2(), 1);
  const RegionSource source = init_region_source(d.inits);
  std::vector<float> buf(64);
  PieceRegion region = PieceRegion::whole(Shape{12});
  EXPECT_THROW(source("h.9.attn.c_attn.bias", region, buf.data()), Error);
  region.start[0] = 30;
  EXPECT_THROW(source("h.0.attn.c_attn.bias", region, buf.data()), Error);
  // A model built outside a DeferInit has no recipes to name.
  Generator g(1);
  auto plain = odd_gpt2().build_random(g);
  nn::init::InitRecord empty_record;
  EXPECT_THROW(parameter_inits(*plain, empty_record), Error);
}

}  // namespace
}  // namespace tessel::train
