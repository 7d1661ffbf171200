// SPDX-License-Identifier: Apache-2.0
// Checkpoints of earlier tessel versions still resume: a checkpoint rewritten in the older
// whole-model layout (model.safetensors + optimizer.safetensors with every full moment, no piece
// files) continues the run bit for bit, as the same checkpoint in pieces does.
#include <gtest/gtest.h>

#include <filesystem>

#include "tessel/io/safetensors.h"
#include "tessel/train/checkpoint/checkpoint.h"
#include "tessel/train/checkpoint/checkpoint_pieces.h"
#include "tessel/train/trainer.h"
#include "trainer_test_util.h"

namespace tessel::train {
namespace {

namespace fs = std::filesystem;

TrainerHooks quiet_steps(std::vector<StepRecord>* steps) {
  TrainerHooks h;
  h.print = [](const std::string&) {};
  h.on_step = [steps](const StepRecord& r) { steps->push_back(r); };
  return h;
}

// The checkpoint at `from` rewritten as an older tessel wrote it, committed under `run_dir`.
std::string as_legacy(const std::string& from, const std::string& run_dir, int64_t step) {
  CheckpointWriter writer(run_dir, step);
  PieceReader reader(from);
  io::NamedTensors moments;
  for (const std::string& name : reader.names())
    if (name.rfind("exp_avg", 0) == 0) moments.emplace_back(name, reader.read_full(name));
  EXPECT_FALSE(moments.empty());
  io::save_safetensors((fs::path(writer.dir()) / "optimizer.safetensors").string(), moments);
  for (const auto& e : fs::directory_iterator(from)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("pieces_", 0) == 0 || name == kCommitMarker) continue;
    fs::copy_file(e.path(), fs::path(writer.dir()) / name);
  }
  return writer.commit(0);
}

TEST(CheckpointLegacy, WholeModelCheckpointStillResumesBitForBit) {
  const auto dir = test::scratch("legacy");
  TrainConfig c = test::base_config(dir, 37, 7);
  c.checkpoint.interval = 3;
  std::vector<StepRecord> full, resumed;
  Trainer(c, "", quiet_steps(&full)).run();
  const std::string pieces = (fs::path(c.checkpoint.dir) / "step_000003").string();
  ASSERT_TRUE(has_piece_index(pieces));
  const std::string legacy = as_legacy(pieces, (dir / "legacy").string(), 3);
  ASSERT_FALSE(has_piece_index(legacy));
  verify_checkpoint(legacy);
  TrainConfig c2 = c;
  c2.checkpoint.dir = (dir / "resumed").string();
  Trainer again(c2, legacy, quiet_steps(&resumed));
  again.run();
  ASSERT_EQ(resumed.size(), 4u);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i].step, full[i + 3].step);
    EXPECT_EQ(resumed[i].loss, full[i + 3].loss) << "step " << resumed[i].step;  // bitwise
  }
}

}  // namespace
}  // namespace tessel::train
