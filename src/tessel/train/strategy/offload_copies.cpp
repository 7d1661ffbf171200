// SPDX-License-Identifier: Apache-2.0
// OffloadStrategy under mixed precision (Micikevicius et al. 2018, with PatrickStar's fp16
// parameter chunks, Fang et al. 2021): every parameter the precision scope covers has a 16-bit
// copy in a chunk list of its own. The copies are written by the same conversion the in-memory
// scope's cast runs (nn::LowPrecisionScope::recast), from the f32 masters after every update
// (OffloadAdamW) and after the masters were written otherwise (here); the scope takes them as
// they are (ops::cast_kept) when their unit's forward starts, so forward and backward compute on
// the same 16-bit values as in memory, and the cast's backward accumulates the same f32
// gradients into the masters' chunks. Under dp with ZeRO-1/2 the masters are the replicas every
// rank holds in plain memory and only their copies are in chunks, laid out and held unit by unit
// the same way, and rounded again after each update's all_gather (ZeRO-3 makes a unit's copies
// from its gather instead).
#include <map>
#include <set>

#include "tessel/core/error.h"
#include "tessel/tensor/unallocated.h"
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

void OffloadStrategy::add_replica_copies(const OffloadShardSetup& setup,
                                         std::map<std::string, size_t>& index) {
  if (setup.compute != DType::BF16 && setup.compute != DType::F16) return;
  // ZeRO-3 makes a unit's copies from its gather and drops them with it (zero3.h).
  if (setup.zero_stage == 3) return;
  std::set<const TensorImpl*> covered;
  for (const Tensor& m : nn::LowPrecisionScope::masters(setup.low_precision_roots))
    covered.insert(m.impl_ptr().get());
  for (size_t i = 0; i < setup.replicas.size(); ++i) index[setup.replicas[i].first] = i;
  states_.resize(setup.replicas.size());
  // Unit by unit in forward order, as on one process: a unit's copies share as few chunks as
  // they can, and the chunks come in the order the forward holds them.
  for (const size_t i : unit_order(setup.units, index)) {
    OffloadedParameter& s = states_[i];
    s.name = setup.replicas[i].first;
    s.param = setup.replicas[i].second;  // the f32 replica, plain memory
    if (!covered.count(s.param.impl_ptr().get())) continue;
    s.copy = unallocated(s.param.shape(), setup.compute).set_name(s.name + ".param16");
    chunks_->add(s.copy, kCopyGroup);
    has_copies_ = true;
  }
}

void OffloadStrategy::refresh_copies(bool scheduled) {
  if (!has_copies_) return;
  // Outside the traced step (start-up, a load): the step's schedule stays where it is.
  if (!scheduled) chunks_->begin_unscheduled();
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
      // Under dp the masters are ZeRO-1/2's replicas, in plain memory.
      if (shards_.empty()) hold(master_chunk, chunks_->chunk_of(s.param), AccessMode::Read);
      hold(copy_chunk, chunks_->chunk_of(s.copy), AccessMode::ReadWrite);
      nn::LowPrecisionScope::recast(s.param, s.copy);
    }
  } catch (...) {
    for (int id : {copy_chunk, master_chunk})
      if (id >= 0) chunks_->release(id);
    if (!scheduled) chunks_->end_unscheduled();
    throw;
  }
  for (int id : {copy_chunk, master_chunk})
    if (id >= 0) chunks_->release(id);
  if (!scheduled) chunks_->end_unscheduled();
}

}  // namespace tessel::train
