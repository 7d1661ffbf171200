// SPDX-License-Identifier: Apache-2.0
// The Sequence style (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models"): the regions between the tensor-parallel ones (LayerNorm, dropout, the
// residual adds) run on this rank's piece of the sequence instead of on a replicated copy, which
// divides their activations by the tensor-parallel degree.
//
// Applied to:
//   LayerNorm, RMSNorm            nothing to change: they are per token, so they run on whatever
//                                 piece arrives; the style records that their parameters'
//                                 gradients are per-rank addends under sequence parallelism.
//   Dropout                       under sequence parallelism each rank draws the elements of
//                                 the full-sequence mask its piece covers (ops::dropout_piece)
//                                 and advances the generator past the whole mask, so the ranks
//                                 together apply exactly one process's mask.
//   Embedding (positions)         under sequence parallelism the output keeps this rank's piece
//                                 of the sequence (dim ndim - 2), and the length is recorded for
//                                 the Colwise gathers that follow.
// With `gather_output` (the norm before an LM head that multiplies with vocab-split weights) the
// output then enters a tensor-parallel region: all-gathered along the sequence under sequence
// parallelism (backward: reduce-scatter), else through Megatron's f (backward: all-reduce).
// Without sequence parallelism the style changes nothing but that gather_output region.
#pragma once

#include "tessel/dist/communicator.h"
#include "tessel/nn/module.h"
#include "tessel/parallel/tensor/tensor_parallel.h"

namespace tessel::parallel {

// Throws Error for a module of another kind, naming its path and type.
void parallelize_sequence(nn::Module& module, dist::CommPtr tp, const TpOptions& options,
                          bool gather_output = false);

}  // namespace tessel::parallel
