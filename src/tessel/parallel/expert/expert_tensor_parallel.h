// SPDX-License-Identifier: Apache-2.0
// Expert tensor parallelism (Megatron-LM's MLP split, Shoeybi et al. 2019, applied to every
// expert of a mixture-of-experts layer, as Megatron-Core's expert-tensor-parallel option does):
// each expert's FFN columns split over the ranks of a tensor-parallel communicator by the balanced
// uneven rule (placement.h), gate/up/fc column-parallel and down/proj row-parallel, the router,
// PR-MoE's dense MLP and the output bias whole on every rank. The rows entering the experts pass
// Megatron's f (backward: their gradient summed over tp) and the experts' outputs its g (forward:
// the partial outputs summed over tp) once per layer call, before the output bias and the combine,
// so every rank combines, routes and computes the auxiliary losses exactly as one rank does.
// Composes with expert parallelism: split first or after parallelize_experts, the dims differ.
// docs/MOE.md, "Expert tensor parallelism".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/nn/module.h"
#include "tessel/sharding/shard_layout.h"

namespace tessel::parallel {

struct ExpertTensorParallelResult {
  // The split expert parameters (full names) and how each lies over tp: dim 1 of gate/up/fc
  // weights and fc_bias, dim 2 of down/proj weights, `full` = the expert FFN width.
  std::vector<std::pair<std::string, sharding::ShardLayout>> sharded;
  int64_t layers = 0;
};

// Splits every nn::MoE's experts under `root` over `tp` (shape-only parameters stay shape-only).
// An Error naming the layer when its FFN width is below tp, or when `root` has no MoE layer.
ExpertTensorParallelResult parallelize_expert_ffn(nn::Module& root, dist::CommPtr tp);

}  // namespace tessel::parallel
