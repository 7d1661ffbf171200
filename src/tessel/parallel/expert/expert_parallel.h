// SPDX-License-Identifier: Apache-2.0
// Expert parallelism (GShard, Lepikhin et al. 2020; DeepSpeed-MoE, Rajbhandari et al. 2022): the
// experts of every mixture-of-experts layer split over the ranks of an `ep` communicator, each rank
// holding num_experts / ep consecutive experts, everything else replicated. A layer routes its own
// tokens as on one rank (capacity and drops per call, as DeepSpeed computes them per rank), then
// the rows travel to their experts' ranks in one variable-size all-to-all (dispatch), run there in
// one grouped GEMM per projection over every source rank's rows of each local expert, and come back
// in the reverse all-to-all (combine); backward mirrors both. docs/MOE.md, "Expert parallelism".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/nn/moe.h"

namespace tessel::parallel {

// Rows of x [rows, ...] regrouped between the ranks of `comm`: send_rows[r] consecutive rows go to
// rank r (in rank order), recv_rows[r] arrive from rank r. Differentiable: the gradient travels
// back by the same exchange with the counts swapped. Every rank must call it in the same order.
Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, dist::Communicator& comm);

// The one clear refusal of a layer that `ep` ranks cannot split ("" when it can).
std::string expert_parallel_error(const nn::MoEConfig& config, int ep, const std::string& layer);

struct ExpertParallelResult {
  std::vector<std::string> params;  // the parameters now holding this rank's experts (full names)
  std::vector<int64_t> experts;     // the global expert count of each parameter, same order
  int64_t layers = 0;               // MoE layers split
};

// Splits every nn::MoE under `root` over `ep`: rank r keeps experts [r E / ep, (r + 1) E / ep)
// of each layer (ExpertMLPs::keep_experts) and the layer dispatches through `ep`. An Error naming
// the layer when its expert count is not divisible by ep, or when `root` has no MoE layer.
ExpertParallelResult parallelize_experts(nn::Module& root, dist::CommPtr ep);

// After parallelize_experts, for ranks of `tp` that hold the same tokens and run every expert on
// every row that reaches their ep rank (whole, or their FFN columns): each tp rank sends only its
// balanced piece of the rows bound for each ep rank, and the tp group gathers the pieces on
// arrival (expert_row_split.h), in the dispatch and the combine, so the all-to-all bytes are
// not repeated tp times. An Error when a layer is not split over ep or `root` has no MoE layer.
void split_expert_rows_over_tp(nn::Module& root, dist::CommPtr tp);

}  // namespace tessel::parallel
