// SPDX-License-Identifier: Apache-2.0
// OffloadStrategy under mixed precision (Micikevicius et al. 2018, with PatrickStar's fp16
// parameter chunks, Fang et al. 2021): every parameter the precision scope covers has a 16-bit
// copy in a chunk list of its own. The copies are written by the same conversion the in-memory
// scope's cast runs (nn::LowPrecisionScope::recast), from the f32 masters after every update
// (OffloadAdamW) and after the masters were written otherwise (here); the scope takes them as
// they are (ops::cast_kept) when their unit's forward starts, so forward and backward compute on
// the same 16-bit values as in memory, and the cast's backward accumulates the same f32
// gradients into the masters' chunks.
#include <map>

#include "tessel/core/error.h"
#include "tessel/train/strategy/offload_strategy.h"

namespace tessel::train {

using memory::AccessMode;
using memory::Tier;

nn::LowPrecisionScope::Kept OffloadStrategy::kept_copies() const {
  auto copies = std::make_shared<std::map<const TensorImpl*, Tensor>>();
  for (const OffloadedParameter& s : states_)
    if (s.copy.defined()) (*copies)[s.param.impl_ptr().get()] = s.copy;
  return [copies](const Tensor& master) {
    auto it = copies->find(master.impl_ptr().get());
    return it == copies->end() ? Tensor() : it->second;
  };
}

void OffloadStrategy::refresh_copies() {
  if (!has_copies_) return;
  // Outside the traced step (start-up, a load): the step's schedule stays where it is.
  chunks_->begin_unscheduled();
  int master_chunk = -1, copy_chunk = -1;
  const auto hold = [this](int& held, int id, AccessMode mode) {
    if (held == id) return;
    if (held >= 0) chunks_->release(held);
    held = -1;
    chunks_->access(id, mode, Tier::Host);
    held = id;
  };
  try {
    for (const OffloadedParameter& s : states_) {
      if (!s.copy.defined()) continue;
      hold(master_chunk, chunks_->chunk_of(s.param), AccessMode::Read);
      hold(copy_chunk, chunks_->chunk_of(s.copy), AccessMode::ReadWrite);
      nn::LowPrecisionScope::recast(s.param, s.copy);
    }
  } catch (...) {
    for (int id : {copy_chunk, master_chunk})
      if (id >= 0) chunks_->release(id);
    chunks_->end_unscheduled();
    throw;
  }
  for (int id : {copy_chunk, master_chunk})
    if (id >= 0) chunks_->release(id);
  chunks_->end_unscheduled();
}

}  // namespace tessel::train
