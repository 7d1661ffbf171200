// SPDX-License-Identifier: Apache-2.0
// The trainer's side of ZeRO: which modules of the model are ZeRO-3's gathering units, and the
// count of the dp collectives a step issued. (ZeRO checkpoints are pieces like every layout's:
// trainer_checkpoint_pieces.cpp.)
#include <unistd.h>

#include <filesystem>

#include "tessel/train/trainer.h"

namespace tessel::train {

// The model's units (one per block, then the final norm, CausalLM::unit_paths); the rest (the
// embeddings, which a tied LM head uses again at the end of forward and the start of backward) is
// the root's unit.
std::vector<parallel::Zero3Unit> Trainer::zero3_units() {
  return layout_zero3_units(
      parallel::zero3_units(*model_, model_->unit_paths()));  // a pipeline stage's part
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
