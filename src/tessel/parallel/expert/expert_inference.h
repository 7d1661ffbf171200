// SPDX-License-Identifier: Apache-2.0
// Expert-parallel inference (DeepSpeed-MoE inference, Rajbhandari et al. 2022, section 5: experts
// spread over ranks, everything else replicated): every rank holds the dense weights and
// num_experts / ep consecutive experts of each MoE layer, and every rank runs the same batch.
// Because the tokens, the router and hence the routing are the same on every rank, nothing has to
// travel to the experts: rank r computes the rows the layer grouped for its own experts (one
// contiguous block of the expert-ordered rows, each expert's GEMM over all of the batch's tokens
// for it) and one variable-size all-gather returns every rank's block, so each rank combines the
// whole expert-ordered output exactly as one process does. The result equals one process bit for
// bit (each expert multiplies the same rows), where the training dispatch's all-to-all
// (expert_parallel.h) would move each token twice for tokens that every rank already holds.
// docs/MOE.md, "Expert-parallel inference".
#pragma once

#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/nn/moe.h"
#include "tessel/parallel/expert/expert_parallel.h"

namespace tessel::parallel {

// Splits every nn::MoE under `root` over `ep` for inference: rank r keeps experts
// [r E / ep, (r + 1) E / ep) (unless a loader kept exactly those already) and the layer computes
// through the inference dispatch. An Error naming the layer when its expert count is not divisible
// by ep (expert_parallel_error), or when `root` has no MoE layer. The dispatch has no backward:
// training splits with parallelize_experts.
ExpertParallelResult parallelize_experts_inference(nn::Module& root, dist::CommPtr ep);

// The first refusal of splitting `root`'s MoE layers over `ep` ranks ("" when every layer can be
// split); `root` may be shape-only (nothing is read).
std::string expert_inference_error(nn::Module& root, int ep);

}  // namespace tessel::parallel
