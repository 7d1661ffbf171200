// SPDX-License-Identifier: Apache-2.0
// Tensor-parallel styles for nn::Linear, applied from outside the model code (Megatron-LM's column-
// and row-parallel linear layers, Shoeybi et al. 2019; the Colwise/Rowwise styles of PyTorch's
// tensor-parallel API).
//
//   style     weight [out, in] holds     input             output               collectives
//   Colwise   rows: out features S(0)    replicated (f)    S(-1) features       bwd all_reduce
//   Rowwise   cols: in features  S(1)    S(-1) features    replicated (g) + b   fwd all_reduce
//
// Pieces follow the balanced uneven rule of sharding/placement.h. The module keeps its parameter
// names and handles: the parameter tensors are rebound in place to this rank's piece, so
// state_dict, named_parameters and optimizers built later see the shards under the same names.
//
// Mechanism: Linear::forward is not virtual and a model holds its layers by their concrete type,
// so neither a subclass nor a wrapper can be swapped in without touching the model. Both styles
// therefore install a forward override (nn::Module::set_forward_override): the module's hooks
// and observers run as before, and the override computes the parallel product in place of the
// layer's body (copy_to_region before the Colwise product, reduce_from_region after the Rowwise
// product, the Rowwise bias added once after the reduction).
//
// Sequence parallelism (Korthikanti et al. 2022): with `sequence_parallel`, activations between
// the tensor-parallel regions hold this rank's piece of the sequence (the dim before the
// features). The Colwise input is then all-gathered along the sequence (backward: reduce-scatter)
// instead of entering through f, and the Rowwise output is reduce-scattered along the sequence
// (backward: all-gather) instead of all-reduced; the Rowwise bias is added to the sequence piece,
// so its gradient is a per-rank addend that the trainer sums over the ranks.
#pragma once

#include <cstdint>
#include <memory>

#include "tessel/dist/communicator.h"
#include "tessel/nn/layers.h"
#include "tessel/tensor/tensor.h"

namespace tessel::parallel {

// Shared by the styles of one parallelize() call under sequence parallelism: the full sequence
// length, recorded where the sequence is first split (the vocab-parallel embedding or a Sequence
// embedding) and read where it is gathered back (Colwise inputs), since uneven pieces do not
// tell the whole length.
struct SequenceState {
  int64_t length = 0;
  // false: every style behaves as without sequence parallelism (incremental decoding, whose one
  // new token per step cannot be split).
  bool active = true;
};

struct TpOptions {
  bool sequence_parallel = false;
  std::shared_ptr<SequenceState> sequence;  // required with sequence_parallel
  // Colwise: the output features are `blocks` equal concatenated blocks, each split in units of
  // `unit` rows (GPT-2's fused qkv: 3 blocks, units of a head); see sharding/shard_layout.h.
  int64_t blocks = 1;
  int64_t unit = 1;
  // Colwise with fewer units than ranks: each unit is held by ranks / units ranks (see
  // sharding/shard_layout.h); the copies' gradients must then be summed over them (the caller's
  // job).
  bool replicate = false;
  // False: the parameters hold no values yet (construction without materialisation: built
  // unwritten, filled once every axis has cut them). Each rank's pieces are then allocated and
  // left unwritten, and nothing of the full tensors is read: reading pages never written makes
  // them resident, which would cost every rank the whole model for a moment.
  bool copy_values = true;
};

// Whether activations between the regions are sequence pieces right now.
inline bool sequence_sharded(const TpOptions& o) {
  return o.sequence_parallel && o.sequence != nullptr && o.sequence->active;
}

// Shards the output features over `tp`: weight rows and bias. The input must be the full
// (replicated) activation, or this rank's sequence piece under sequence parallelism; the output
// holds this rank's output features of the full sequence. Needs out_features >= tp->size().
void parallelize_colwise(nn::Linear& linear, dist::CommPtr tp, const TpOptions& options = {});

// Shards the input features over `tp`: weight columns; the bias stays whole and is added once
// after the all_reduce. With `input_is_sharded` the input holds this rank's input features (a
// preceding Colwise output); otherwise it is the full activation and each rank takes its piece
// (its gradient is then all-reduced, so every rank gets the full input gradient).
// Needs in_features >= tp->size().
// Under sequence parallelism the output is this rank's sequence piece.
void parallelize_rowwise(nn::Linear& linear, dist::CommPtr tp, bool input_is_sharded = true,
                         const TpOptions& options = {});

// Before `--weights int8` converts a Rowwise layer: where this rank's columns cut the int8
// product's 32-column activation blocks, rebinds its float piece [out, len] to [out, len + pads]
// with zero columns that put its blocks where one process's start (int8_row_blocks.h); the
// forward override then multiplies in the whole row's blocks. Returns whether it padded. A
// layer padded so is for int8 inference only (its float product would not fit its input).
bool pad_rowwise_int8(nn::Linear& linear, const dist::Communicator& tp);

enum class TpStyle { None, Colwise, Rowwise };
// Read from the parameter shapes against in_features()/out_features() (which keep the global
// sizes), so it needs no registry. A layer sharded over a world of one reads as None.
TpStyle tp_style(const nn::Linear& linear);

// The full weight [out, in] and bias [out] (or their gradients, with `grad`) on every rank of
// `tp`, for tests and checkpoints, of plain (unfused) layers: a fused Colwise layer (blocks > 1)
// gathers through sharding/shard_layout.h's gather_tensor with its sharding::ShardLayout.
// Collective: every rank of `tp` must call it. Undefined bias: undefined result.
Tensor gather_full_weight(const nn::Linear& linear, dist::Communicator& tp, bool grad = false);
Tensor gather_full_bias(const nn::Linear& linear, dist::Communicator& tp, bool grad = false);

}  // namespace tessel::parallel
