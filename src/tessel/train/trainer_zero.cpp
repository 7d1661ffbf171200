// SPDX-License-Identifier: Apache-2.0
// The trainer's side of ZeRO: which modules of GPT-2 are ZeRO-3's gathering units, and the
// per-rank checkpoint shards every ZeRO run writes (shard_checkpoint.h holds the format).
#include <unistd.h>

#include <filesystem>

#include "tessel/train/shard_checkpoint.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

// One unit per transformer block and one for ln_f; the rest (the embeddings, which the tied LM
// head uses again at the end of forward and the start of backward) is the root's unit.
std::vector<parallel::Zero3Unit> Trainer::zero3_units() {
  std::vector<std::string> paths;
  for (int64_t i = 0; i < model_->config().n_layer; ++i) paths.push_back("h." + std::to_string(i));
  paths.push_back("ln_f");
  return layout_zero3_units(parallel::zero3_units(*model_, paths));  // a pipeline stage's part
}

void Trainer::write_zero_shards(const std::string& leader_dir) {
  // Rank 0 made the temporary checkpoint directory; the others learn its name from it.
  std::string dir = leader_dir;
  constexpr int64_t kMax = 4096;
  Tensor name = zeros({kMax}, DType::I32);
  if (leader()) {
    TESSEL_CHECK(int64_t(dir.size()) < kMax, "checkpoint directory name longer than ", kMax,
                 " bytes: ", dir);
    for (size_t i = 0; i < dir.size(); ++i) name.data<int32_t>()[i] = (unsigned char)dir[i];
  }
  dp_->broadcast(name, 0);
  dir.clear();
  for (int64_t i = 0; i < kMax && name.data<int32_t>()[i] != 0; ++i)
    dir.push_back(char(name.data<int32_t>()[i]));
  const int stage = zero_->stage();
  const std::vector<Tensor> blocks = [&] {
    if (!zero3_) return parameter_blocks(*ddp_);
    std::vector<Tensor> out;
    for (int64_t b = 0; b < ddp_->bucket_count(); ++b) out.push_back(zero3_->parameter_shard(b));
    return out;
  }();
  write_zero_shard(dir, *ddp_, stage, blocks, zero_->local_state());
  if (leader()) write_zero_index(dir, *ddp_, stage);
  dp_->barrier();  // every shard is on disk before rank 0 seals the directory
}

void Trainer::count_collectives(uint64_t issued_before, StepRecord& r) const {
  dist::RankContext& ctx = dp_->context();
  const uint64_t issued = ctx.issued_count() - issued_before;
  // The recorder is a ring: a step that issued more than it holds is counted in part.
  for (const dist::Record& rec : ctx.recent(size_t(issued))) {
    if (rec.label_str() != dp_->label() || !dist::is_collective(rec.kind)) continue;
    ++r.collectives[std::string(dist::op_kind_name(rec.kind))];
    if (rec.has_tensor) r.collective_bytes += rec.shape.numel() * int64_t(dtype_size(rec.dtype));
  }
}

}  // namespace tessel::train
