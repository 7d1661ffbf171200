// SPDX-License-Identifier: Apache-2.0
// Offloaded start-up streams (docs/MEMORY.md, The trainer > Start-up): each parameter is computed
// from its initialisation recipe, or read from a Hugging Face file, straight into its chunk while
// the layout is sealed, and the gradients and moments start as zero chunks. Under budgets that
// leave chunks in every tier, the parameters an offloaded trainer starts with are bitwise the
// in-memory trainer's, for a fresh initialisation and for model.init_from, and every moment is
// zero; chunks bound for NVMe are written there during start-up.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "offload_test_util.h"
#include "tessel/models/family.h"
#include "tessel/train/trainer.h"

namespace tessel::train {
namespace {

using memory::AccessMode;
using memory::Tier;
using test::collect;
using test::odd_config;
using test::offloaded;
using test::scratch;
namespace fs = std::filesystem;

// Every parameter of `chunked` (read in the host tier, chunk by chunk) against `plain`'s, and
// every AdamW moment zero. Returns the parameters compared.
size_t expect_same_start(Trainer& plain, Trainer& chunked) {
  memory::ChunkManager& chunks = chunked.offload()->chunks();
  const NamedTensors pa = plain.model().named_parameters();
  const NamedTensors pb = chunked.model().named_parameters();
  EXPECT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size() && i < pb.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    const int id = chunks.chunk_of(pb[i].second);
    chunks.access(id, AccessMode::Read, Tier::Host);
    EXPECT_EQ(0,
              std::memcmp(pa[i].second.data_ptr(), pb[i].second.data_ptr(), pa[i].second.nbytes()))
        << pa[i].first;
    chunks.release(id);
  }
  for (const OffloadedParameter& s : chunked.offload()->parameters()) {
    for (const Tensor& m : {s.exp_avg, s.exp_avg_sq}) {
      const int id = chunks.chunk_of(m);
      chunks.access(id, AccessMode::Read, Tier::Host);
      const float* v = m.data<float>();
      int64_t nonzero = 0;
      for (int64_t k = 0; k < m.numel(); ++k) nonzero += v[k] != 0.0f;
      EXPECT_EQ(nonzero, 0) << s.name;
      chunks.release(id);
    }
  }
  chunks.check_accounting();
  for (Tier t : {Tier::Device, Tier::Host})
    EXPECT_LE(chunks.pool(t).peak_bytes(), chunks.pool(t).budget()) << memory::tier_name(t);
  return pa.size();
}

TEST(OffloadStartup, ParametersAreBitwiseTheInMemoryOnesInEveryTier) {
  const auto dir = scratch("offload_startup");
  fs::create_directories(dir / "nvme");
  const TrainConfig plain_config = odd_config(dir, "run_plain");
  const size_t need = test::device_chunks_needed(plain_config);
  const auto off_config = [&](TrainConfig c) {
    return offloaded(std::move(c), need, 4, (dir / "nvme").string());
  };

  // A fresh initialisation: recipes evaluated in the chunks.
  Trainer plain(plain_config, "", collect(nullptr));
  Trainer chunked(off_config(odd_config(dir, "run_off")), "", collect(nullptr));
  ASSERT_NE(chunked.offload(), nullptr);
  memory::ChunkManager& chunks = chunked.offload()->chunks();
  int on_nvme = 0;
  for (int id = 0; id < chunks.num_chunks(); ++id)
    on_nvme += chunks.chunk(id).group == "param" && chunks.chunk(id).tier == Tier::Nvme;
  ASSERT_GT(on_nvme, 0) << "the budgets must leave parameter chunks on NVMe";
  EXPECT_GE(chunks.stats().nvme_writes, int64_t(chunks.num_chunks() - int(need) - 4));
  EXPECT_GT(expect_same_start(plain, chunked), 10u);

  // model.init_from a Hugging Face directory (the fresh model, saved), under another seed: the
  // values come from the file, read straight into the chunks.
  models::save_model(plain.model(), (dir / "hf").string());
  TrainConfig from_file = odd_config(dir, "run_file_plain");
  from_file.model.init_from = (dir / "hf").string();
  from_file.train.seed = plain_config.train.seed + 1;
  TrainConfig from_file_off = odd_config(dir, "run_file_off");
  from_file_off.model.init_from = (dir / "hf").string();
  from_file_off.train.seed = plain_config.train.seed + 1;
  Trainer loaded(from_file, "", collect(nullptr));
  Trainer loaded_chunked(off_config(from_file_off), "", collect(nullptr));
  expect_same_start(loaded, loaded_chunked);
  expect_same_start(plain, loaded_chunked);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessel::train
