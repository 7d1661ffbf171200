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
  // the dense parameters and of its experts. Pipeline stages alone: each stage offloads its own
  // parameters as one process does; with dp, each rank its ZeRO shards of its stage's state.
  // pp with tp or ep, and ep with tp, not yet.
  const bool no_pp = layout_.pp_size() == 1;
  const bool tp_without_ep = layout_.tp_size() > 1 && no_pp && !layout_.ep;
  const bool pp_without_tp = !no_pp && !layout_.ep && layout_.tp_size() == 1;  // alone or with dp
  TESSEL_CHECK(layout_.world_size() == layout_.dp_size() || tp_without_ep || pp_without_tp,
               "train: memory offload (memory.device_budget) composes with data parallelism "
               "(expert parallelism inside it included), tensor parallelism, or both, or with "
               "pipeline stages alone or with data parallelism (no tp, no ep), for now; this "
               "layout has ",
               layout_.world_size(), " ranks (", layout_.str(), ")");
  TESSEL_CHECK(!dp_ || config_.parallel.zero_stage > 0, "train: memory offload with --dp ",
               layout_.dp_size(),
               " needs parallel.zero_stage 1, 2 or 3 (each rank offloads its own shard of the "
               "state; ZeRO-3 also its parameters' shard); this run has zero_stage 0");
  // A pipeline step's one set of 16-bit copies spans its micro-batches (copies_span_step); the
  // ZeRO shards' layout does not keep them held that long yet.
  TESSEL_CHECK(!(dp_ && !no_pp && precision_), "train: memory offload with --pp ",
               layout_.pp_size(), " and --dp ", layout_.dp_size(), " trains in f32 for now; this ",
               "run has train.precision ", config_.train.precision,
               " (pipeline stages alone offload bf16/fp16)");
}

}  // namespace tessel::train
