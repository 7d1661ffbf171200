// SPDX-License-Identifier: Apache-2.0
// Loading only a rank's shards from a whole Hugging Face checkpoint: every kind of local share a
// rank can hold (tensor-parallel pieces with fused per-head blocks, uneven Rowwise columns,
// vocabulary padding, ZeRO flat ranges cut through rows and pieces), read region by region from a
// GPT-2 directory (Conv1D weights stored transposed, some tensors in bf16 and f16, the
// `transformer.` prefix, a tied lm_head.weight beside wte) and from a LLaMA directory, equals the
// same cut of the model loaded whole by the family; a tied head that differs, a tensor the layout
// lacks and a region outside the tensor are refused. Mixtral's per-expert tensors are read into
// tessel's stacks, ranges crossing from one expert into the next included.
#include "tessel/train/checkpoint/safetensors_regions.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "tessel/io/safetensors.h"
#include "tessel/models/gpt2/gpt2_checkpoint.h"
#include "tessel/models/gpt2/gpt2_config.h"
#include "tessel/models/llama/llama_config.h"
#include "tessel/models/mixtral/mixtral_family.h"
#include "tessel/sharding/shard_layout.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"

namespace tessel::train {
namespace {

namespace fs = std::filesystem;

struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name)
      : path(fs::path(testing::TempDir()) /
             ("tessel_regions_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

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

// A random GPT-2 written as the Hub would: `transformer.` names, Conv1D weights transposed, the
// MLP's weights in bf16 and the position table in f16, and lm_head.weight (`head`) beside wte.
void write_gpt2(const models::CausalLM& model, const std::string& dir, const Tensor& head) {
  io::NamedTensors tensors;
  for (auto& [name, t] :
       models::gpt2_to_hf(dynamic_cast<const models::GPT2&>(model), "transformer.")) {
    Tensor stored = t;
    if (name.find(".mlp.c_fc.weight") != std::string::npos) stored = stored.to(DType::BF16);
    if (name == "transformer.wpe.weight") stored = stored.to(DType::F16);
    tensors.emplace_back(name, stored);
  }
  tensors.emplace_back("lm_head.weight", head);
  fs::create_directories(dir);
  io::save_safetensors((fs::path(dir) / "model.safetensors").string(), tensors);
}

// The model loaded whole by the family, and the region source over the same directory, built
// the way the trainer builds them (layout from a shape-only model).
struct Loaded {
  std::shared_ptr<models::CausalLM> whole;
  RegionSource source;
};

Loaded open_both(const models::ModelConfig& config, const std::string& dir) {
  Loaded l;
  auto checkpoint = std::make_shared<const io::SafetensorsCheckpoint>(
      io::SafetensorsCheckpoint::open(dir, io::SafetensorsLoad::Read));
  l.whole = config.build_empty();
  config.family().load_hf(*l.whole, *checkpoint);
  auto shapes = config.build_empty();
  l.source = safetensors_region_source(checkpoint, config.family().hf_layout(*shapes, *checkpoint));
  return l;
}

TEST(SafetensorsRegions, WholeTensorsEqualTheFamilysLoad) {
  ScratchDir dir("whole");
  const models::GPT2Config gpt2 = odd_gpt2();
  Generator g(3);
  auto model = gpt2.build_random(g);
  write_gpt2(*model, (dir.path / "gpt2").string(), model->find("wte.weight"));
  models::LlamaConfig llama = models::LlamaConfig::preset("tiny");
  llama.vocab_size = 33;
  llama.bos_token_id = 1;
  llama.eos_token_ids = {2};
  Generator g2(4);
  auto lm = llama.build_random(g2);
  models::save_model(*lm, (dir.path / "llama").string());
  for (auto [config, sub] :
       {std::pair<const models::ModelConfig*, std::string>{&gpt2, "gpt2"}, {&llama, "llama"}}) {
    const Loaded l = open_both(*config, (dir.path / sub).string());
    for (const auto& [name, want] : l.whole->named_parameters()) {
      Tensor got = full(want.shape(), 7.0);
      fill_placed(l.source, name, sharding::LocalLayout::whole(want.shape()), want.shape(), 0,
                  want.numel(), got.flatten());
      EXPECT_TRUE(same_bits(want, got)) << sub << " " << name;
    }
  }
}

// Tensor-parallel pieces and ZeRO ranges of them, transposed and widened on the way.
TEST(SafetensorsRegions, PiecesAndRangesEqualTheirCutOfTheWhole) {
  ScratchDir dir("pieces");
  const models::GPT2Config config = odd_gpt2();
  Generator g(5);
  auto model = config.build_random(g);
  write_gpt2(*model, dir.path.string(), model->find("wte.weight"));
  const Loaded l = open_both(config, dir.path.string());
  struct Case {
    std::string name;
    sharding::ShardLayout spec;
  };
  const std::vector<Case> cases = {
      // q, k, v blocks split per head (unit 4 rows) over 3 ranks; stored [in, out].
      {"h.0.attn.c_attn.weight", {0, 36, 0, 3, 4, false}},
      {"h.1.attn.c_attn.bias", {0, 36, 0, 3, 4, false}},
      // Rowwise: columns, uneven (7 over 3 ranks: 3, 2, 2); stored [in, out].
      {"h.1.mlp.c_proj.weight", {1, 7, 0, 1, 1, false}},
      // Colwise over a bf16 tensor stored transposed.
      {"h.0.mlp.c_fc.weight", {0, 7, 0, 1, 1, false}},
      // The vocabulary padded from 37 to 39 rows: the last rank's piece ends in zero rows; its
      // tied copy lm_head.weight is read over the same elements.
      {"wte.weight", {0, 37, 39, 1, 1, false}},
  };
  for (const Case& c : cases) {
    const Tensor whole = l.whole->find(c.name);
    for (int rank = 0; rank < 3; ++rank) {
      const Tensor want = sharding::shard_tensor(whole, c.spec, 3, rank);
      const sharding::LocalLayout placement =
          sharding::LocalLayout::of(c.spec, want.shape(), 3, rank);
      Tensor got = full(want.shape(), 7.0);
      fill_placed(l.source, c.name, placement, want.shape(), 0, want.numel(), got.flatten());
      EXPECT_TRUE(same_bits(want, got)) << c.name << " rank " << rank;
      const int64_t n = want.numel();
      for (int64_t part = 0; part < 4; ++part) {
        const int64_t begin = n * part / 4, end = n * (part + 1) / 4;
        Tensor block = full({end - begin}, 7.0);
        fill_placed(l.source, c.name, placement, want.shape(), begin, end, block);
        EXPECT_TRUE(same_bits(want.flatten().narrow(0, begin, end - begin).clone(), block))
            << c.name << " rank " << rank << " elements " << begin << ".." << end;
      }
    }
  }
  // The position table (f16) as ZeRO flat ranges of the whole tensor, cut through rows.
  const Tensor wpe = l.whole->find("wpe.weight");
  for (int64_t begin : {int64_t(0), int64_t(5), int64_t(77)}) {
    const int64_t end = std::min(begin + 29, wpe.numel());
    Tensor block = full({end - begin}, 7.0);
    fill_placed(l.source, "wpe.weight", sharding::LocalLayout::whole(wpe.shape()), wpe.shape(),
                begin, end, block);
    EXPECT_TRUE(same_bits(wpe.flatten().narrow(0, begin, end - begin).clone(), block)) << begin;
  }
}

TEST(SafetensorsRegions, RefusesADifferentTiedHeadUnknownTensorsAndRegionsOutside) {
  ScratchDir dir("refuse");
  const models::GPT2Config config = odd_gpt2();
  Generator g(7);
  auto model = config.build_random(g);
  Tensor head = model->find("wte.weight").clone();
  head.data<float>()[12 * 30 + 5] += 1.0f;  // row 30, beyond the first rank's rows
  write_gpt2(*model, dir.path.string(), head);
  auto checkpoint = std::make_shared<const io::SafetensorsCheckpoint>(
      io::SafetensorsCheckpoint::open(dir.path.string(), io::SafetensorsLoad::Read));
  auto shapes = config.build_empty();
  Loaded l;
  l.source = safetensors_region_source(checkpoint, config.family().hf_layout(*shapes, *checkpoint));
  std::vector<float> buf(37 * 12);
  PieceRegion rows = PieceRegion::whole(Shape{37, 12});
  rows.length[0] = 13;
  rows.end = rows.box_numel();
  EXPECT_NO_THROW(l.source("wte.weight", rows, buf.data()));  // rows 0..12 agree
  rows.start[0] = 24;
  try {
    l.source("wte.weight", rows, buf.data());
    ADD_FAILURE() << "a tied head that differs was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight differs from transformer.wte.weight"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(l.source("h.9.attn.c_attn.bias", PieceRegion::whole(Shape{36}), buf.data()), Error);
  PieceRegion outside = PieceRegion::whole(Shape{36});
  outside.start[0] = 30;
  EXPECT_THROW(l.source("h.0.attn.c_attn.bias", outside, buf.data()), Error);
}

// Mixtral stores one tensor per expert where tessel holds [experts, out, in]: whole stacks and
// ZeRO flat ranges that cross from one expert's stored tensor into the next equal the family's
// whole load.
TEST(SafetensorsRegions, StackedExpertsReadAcrossTheirStoredTensors) {
  ScratchDir dir("experts");
  models::LlamaConfig config = models::mixtral_preset("tiny");
  config.vocab_size = 33;
  config.bos_token_id = 1;
  config.eos_token_ids = {2};
  config.hidden = 24;
  config.intermediate_size = 13;
  config.num_hidden_layers = 2;
  config.num_local_experts = 3;
  Generator g(9);
  auto model = config.build_random(g);
  models::save_model(*model, dir.path.string());
  const Loaded l = open_both(config, dir.path.string());
  int stacks = 0;
  for (const auto& [name, want] : l.whole->named_parameters()) {
    if (name.find(".experts.") == std::string::npos) continue;
    ++stacks;
    ASSERT_EQ(want.ndim(), 3) << name;
    const Tensor saved = model->find(name);
    EXPECT_TRUE(same_bits(saved, want)) << name;
    Tensor got = full(want.shape(), 7.0);
    fill_placed(l.source, name, sharding::LocalLayout::whole(want.shape()), want.shape(), 0,
                want.numel(), got.flatten());
    EXPECT_TRUE(same_bits(want, got)) << name;
    const int64_t per_expert = want.numel() / want.size(0);
    for (int64_t begin : {int64_t(0), per_expert - 5, 2 * per_expert - 1}) {
      const int64_t end = std::min(begin + per_expert + 7, want.numel());
      Tensor block = full({end - begin}, 7.0);
      fill_placed(l.source, name, sharding::LocalLayout::whole(want.shape()), want.shape(), begin,
                  end, block);
      EXPECT_TRUE(same_bits(want.flatten().narrow(0, begin, end - begin).clone(), block))
          << name << " elements " << begin << ".." << end;
    }
  }
  EXPECT_EQ(stacks, 2 * 3);  // two layers, three projections
}

}  // namespace
}  // namespace tessel::train
