// SPDX-License-Identifier: Apache-2.0
// Mixture-of-experts layers under sequence parallelism (Korthikanti et al. 2022). Between the
// tensor-parallel regions each tp rank holds its piece of the sequence. Routing is per token but
// for what the whole call shares: the capacity (a function of the call's token count), GShard's
// dropping order (over the call's tokens in order) and the auxiliary losses (means over them). So
// each MoE layer routes its own piece: the tp ranks all-gather every token's k choices (k integers
// a token, not its hidden vector), admit the whole call's pairs as one process does and keep their
// piece's; the balance and z losses take each piece's addend with the sum over tp as value. Each
// tp rank's experts then compute its piece's rows only (under expert parallelism it sends them
// over its ep group), and the layer's parameters get a per-rank addend, which the trainer sums
// over tp with the other sequence-parallel gradients. docs/MOE.md, "ep with tp".
// Router jitter routes pieces too (each piece draws its tokens' elements of the whole call's
// noise). Expert tensor parallelism keeps the earlier form, gathering the pieces (all-gather along
// the sequence), routing and running every token on every tp rank, keeping this rank's piece of
// the output: each rank computes its columns of every row, so nothing but the router is repeated,
// Megatron's f/g need the same rows on every rank, and routing the pieces would have to gather up
// to k rows a token where the sequence gather moves one. There the gather's backward takes this
// rank's piece and the layer's parameters get the whole sequence's gradient on every tp rank,
// left out of the sum over tp.
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

// The full names of the parameters (router, experts, PR-MoE's dense MLP) of every nn::MoE under
// `root` that gathers the sequence (one that does not route its own piece): computed from the
// whole sequence on every tp rank under sequence parallelism. `pieces`: those of the layers that
// route their own piece instead (their gradients are per-rank addends).
std::set<std::string> moe_parameter_names(nn::Module& root, bool pieces = false);

}  // namespace tessel::parallel
