// SPDX-License-Identifier: Apache-2.0
// Mixture-of-experts layers under sequence parallelism (Korthikanti et al. 2022). Between the
// tensor-parallel regions each tp rank holds its piece of the sequence, but a router must see the
// whole sequence: the capacity is a function of the tokens of the call, GShard's dropping order
// runs over them in order, and the balance loss is their mean. So each MoE layer gathers the
// pieces of its input (all-gather along the sequence), routes and runs its experts on every token
// exactly as without sequence parallelism (the same on every rank of the tp group: the layer
// stays whole, or, under expert tensor parallelism, its experts' columns are split, and under
// expert parallelism each tp rank sends its piece of the rows), and keeps this rank's piece of
// the output. The tokens, and so the gradients reaching the gather, are the same on every tp rank:
// its backward takes this rank's piece (not a reduce-scatter, which would count them tp times),
// and the piece's backward all-gathers. The layer's parameters then get the whole sequence's
// gradient on every tp rank, not a per-rank addend: the trainer leaves them out of sequence
// parallelism's sum over tp. docs/MOE.md, "ep with tp".
#pragma once

#include <memory>
#include <set>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/nn/module.h"
#include "tessel/parallel/tensor/tensor_parallel.h"

namespace tessel::parallel {

// Installs the gather on every nn::MoE under `root` (`sequence`: parallelize()'s shared state,
// whose length the gather reads; while it is inactive the layers run on what they are given).
// Returns the number of MoE layers.
int64_t gather_moe_tokens_over_sequence(nn::Module& root, dist::CommPtr tp,
                                        std::shared_ptr<SequenceState> sequence);

// The full names of the parameters of every nn::MoE under `root` (router, experts, PR-MoE's dense
// MLP): computed from the whole sequence on every tp rank under sequence parallelism.
std::set<std::string> moe_parameter_names(nn::Module& root);

}  // namespace tessel::parallel
