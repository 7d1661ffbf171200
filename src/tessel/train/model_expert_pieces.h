// SPDX-License-Identifier: Apache-2.0
// Where a mixture of experts' expert tensors lie on a rank that loads them for inference under
// --tp, --ep or both (generate and serve; docs/MOE.md, "Tensor-parallel inference"): each expert's
// FFN columns split over tp as training's --etp splits them (parallel/expert/
// expert_tensor_parallel.h: gate/up/fc rows and fc_bias columns, down/proj columns, by the balanced
// uneven rule), and, under ep, the rank's block of experts (rows of dim 0) around those columns, as
// the trainer's checkpoint places an ep × etp piece. The dense plan leaves MoE layers whole, so
// this is the loaders' one place that knows about experts.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/models/causal_lm.h"
#include "tessel/sharding/shard_layout.h"
#include "tessel/train/model_tensor_parallel.h"

namespace tessel::train {

struct ExpertPieces {
  std::map<std::string, sharding::ShardLayout> ffn;  // expert parameters split over tp
  std::map<std::string, int64_t> experts;            // expert parameters split over ep: E
  int tp_size = 1, tp_rank = 0, ep_size = 1, ep_rank = 0;

  // Where this rank's local tensor `name` (of shape `local`) lies in the whole model's tensor:
  // an expert piece as above, any other parameter as the dense plan holds it (`tp` may be null).
  sharding::LocalLayout placement(const ModelTensorParallel* tp, const std::string& name,
                                  const Shape& local) const;
};

// Splits every MoE layer's experts of `model` (shape-only or not) over `tp` by FFN columns; nothing
// for a dense model or a null / one-rank `tp`. An Error naming a layer whose width is below tp.
ExpertPieces split_experts_over_tp(models::CausalLM& model, const dist::CommPtr& tp);

// The bytes of every MoE layer's expert tensors this rank holds (quantized stacks: their blocks);
// with `keep`, of the kept tensors only (a pipeline stage's).
int64_t expert_parameter_bytes(models::CausalLM& model,
                               const std::function<bool(const std::string&)>& keep = {});

}  // namespace tessel::train
