// SPDX-License-Identifier: Apache-2.0
// The layouts memory offload composes with (docs/MEMORY.md, "The trainer"), checked once every
// axis is built and before anything is laid out in chunks, so a layout it does not cover is
// refused at start with one error naming the ones it does.
#include "tessel/train/trainer.h"

namespace tessel::train {

void Trainer::check_offload_layout() const {
  // ep with tp: each rank would hold tp's pieces next to its experts' shards over ep_dp, and the
  // experts' gradients of a tp group (summed over tp under sequence parallelism) in chunks; that
  // layout is not built, so it is refused by name (docs/MEMORY.md, "With expert parallelism").
  TESSEL_CHECK(!(layout_.ep && layout_.tp_size() > 1),
               "train: memory offload (memory.device_budget) with --ep ", layout_.ep_size(),
               " and --tp ", layout_.tp_size(),
               " together is not supported yet; offload works with --ep inside dp (--ep ",
               layout_.ep_size(), " without --tp) or with --tp without --ep");
  // Tensor parallelism: each tp rank offloads its own pieces as one process does, or under dp its
  // ZeRO shards of them. Expert parallelism lies inside dp: each rank offloads its ZeRO shards of
  // the dense parameters and of its experts. Pipeline stages: each stage offloads its own
  // parameters (its tp pieces under tp) as one process does; with dp, each rank its ZeRO shards of
  // its stage's state, under ep its stage's experts' too (the expert axis trains the stage's
  // experts only, so add_expert_offload_shards lays out just those).
  TESSEL_CHECK(!dp_ || config_.parallel.zero_stage > 0, "train: memory offload with --dp ",
               layout_.dp_size(),
               " needs parallel.zero_stage 1, 2 or 3 (each rank offloads its own shard of the "
               "state; ZeRO-3 also its parameters' shard); this run has zero_stage 0");
}

}  // namespace tessel::train
