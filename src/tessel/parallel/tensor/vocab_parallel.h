// SPDX-License-Identifier: Apache-2.0
// Vocabulary parallelism (Megatron-LM, Shoeybi et al. 2019): the token embedding's rows are split
// over the tensor-parallel ranks, and the cross-entropy is computed from logits split along the
// vocabulary without ever gathering the full [B, T, V] logits.
//
// The vocabulary is padded to a multiple of the ranks (Megatron-LM's padded vocab), so every rank
// holds vocab_padded / tp rows; the padding rows are zeros that no id selects, and their logit
// columns are excluded from the softmax, so they never contribute to the loss or its gradient.
//
// Embedding: ids outside this rank's rows look up zeros, and the ranks' partial embeddings are
// summed: an all-reduce, or under sequence parallelism a reduce-scatter along the sequence (each
// rank keeps its piece of the sequence; Korthikanti et al. 2022).
//
// Cross-entropy: per row, the maximum of the local logits (all-reduce max), then the local sum of
// exp(logit - max) and the target's logit when this rank holds it (one all-reduce sum of both).
// loss = log(sum) + max - target logit. Backward is local: softmax - one-hot on this rank's
// columns, so the logits' gradient stays split along the vocabulary.
#pragma once

#include <cstdint>
#include <memory>

#include "tessel/dist/communicator.h"
#include "tessel/nn/layers.h"
#include "tessel/parallel/tensor/tensor_parallel.h"
#include "tessel/tensor/tensor.h"

namespace tessel::parallel {

// The vocabulary padded to a multiple of `parts` (itself when it divides).
int64_t padded_vocab_size(int64_t vocab, int parts);

// Splits `embedding`'s rows (the vocabulary) over `tp`, padded (see above); its weight is rebound
// in place to this rank's [padded / tp, dim] rows. Under options.sequence_parallel the output is
// this rank's sequence piece (dim ndim - 2 of the output) and the sequence length is recorded in
// options.sequence.
void parallelize_vocab_embedding(nn::Embedding& embedding, dist::CommPtr tp,
                                 const TpOptions& options = {});

// Mean cross-entropy of logits split along the vocabulary: `logits` [..., V_local] holds columns
// [offset, offset + V_local) of a vocabulary whose first `vocab` columns are real (the rest is
// padding); targets i32/i64 of logits' leading shape, ignore_index rows skipped (NaN when every
// row is ignored, as ops::cross_entropy). Every rank of `tp` gets the same f32 scalar. Collective
// (2 all-reduces forward, none backward); differentiable in `logits`.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    dist::Communicator& tp, int64_t vocab, int64_t offset,
                                    int64_t ignore_index = -100);

}  // namespace tessel::parallel
