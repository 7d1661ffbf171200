// SPDX-License-Identifier: Apache-2.0
// The layouts memory offload composes with (docs/MEMORY.md, "The trainer"), checked once every
// axis is built and before anything is laid out in chunks, so a layout it does not cover is
// refused at start with one error naming the ones it does.
#include "tessel/train/trainer.h"

namespace tessel::train {

void Trainer::check_offload_layout() const {
  // Tensor parallelism: each tp rank offloads its own pieces as one process does, or under dp its
  // ZeRO shards of them. Expert parallelism lies inside dp: each rank offloads its ZeRO shards of
  // the dense parameters (its tp pieces under tp) and of its experts (whole, or under --etp its
  // columns). Pipeline stages: each stage offloads its own
  // parameters (its tp pieces under tp) as one process does; with dp, each rank its ZeRO shards of
  // its stage's state, under ep its stage's experts' too (the expert axis trains the stage's
  // experts only, so add_expert_offload_shards lays out just those).
  TESSEL_CHECK(!dp_ || config_.parallel.zero_stage > 0, "train: memory offload with --dp ",
               layout_.dp_size(),
               " needs parallel.zero_stage 1, 2 or 3 (each rank offloads its own shard of the "
               "state; ZeRO-3 also its parameters' shard); this run has zero_stage 0");
}

}  // namespace tessel::train
