// SPDX-License-Identifier: Apache-2.0
// A model directory loaded straight into this rank's tensor-parallel share: the model is built
// shape-only (tensor/unallocated.h, as the trainer's construction without materialisation), cut by
// the family's plan into shape-only pieces, and each rank then allocates only the pieces it holds
// and reads into them from the safetensors files only their byte ranges, with pread (nothing is
// mapped; train/checkpoint/safetensors_regions.h), as the trainer does for its first step. This is
// the per-shard loading of Megatron-LM's distributed checkpoints applied to an unsharded Hugging
// Face directory: a rank's resident set and its address space grow by its share of the weights,
// not by the whole model. A mixture of experts' MoE layers, which the dense plan leaves whole, have
// each expert's FFN columns split over tp as training's --etp does (model_expert_pieces.h).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/models/causal_lm.h"
#include "tessel/models/inference_weights.h"
#include "tessel/train/model_tensor_parallel.h"

namespace tessel::train {

struct TpLoadedModel {
  std::shared_ptr<models::CausalLM> model;  // this rank's share, in eval mode
  std::shared_ptr<ModelTensorParallel> tp;
  int64_t values_read = 0;   // weight values this rank read from the files
  int64_t expert_bytes = 0;  // a mixture of experts: its experts' bytes on this rank
};

// `dir` holds config.json and safetensors weights (a model directory or a whole-model tessel
// checkpoint). Collective over `tp` (the plan's parallelization is). `note` receives the plan's
// one-line notices (the vocabulary padding). With `keep`, only the parameters it accepts are read
// and allocated (a pipeline stage's, cli/pp_model.h); the others stay shape-only.
TpLoadedModel load_model_tp(const std::string& dir, const dist::CommPtr& tp,
                            const std::function<void(const std::string&)>& note = {},
                            const std::function<bool(const std::string&)>& keep = {});

// `--weights int8|bf16|f16` of a tensor-parallel model (the model in eval mode): each rank converts
// the pieces it holds, and the layers' forward overrides multiply through them. A row-parallel
// layer's rank holds a slice of every row, so int8's per-row scales come from the whole rows: the
// pieces' row maxima are all-reduced (max) over tp, one [rows] all-reduce per row-parallel layer,
// and each rank quantizes its slice with them. Every code and scale then equals one rank's
// `--weights int8`. A piece whose columns cut the product's 32-column activation blocks is padded
// first (parallel::pad_rowwise_int8), so the activations are rounded in the whole row's blocks
// too, and the output differs from one rank's only by the order of the sums (docs/SERVING.md,
// "Converted weights under tensor parallelism"). Collective over tp. `keep`: as for
// models::convert_inference_weights (a pipeline stage's layers; the same on every rank of tp).
models::WeightConversion convert_inference_weights_tp(
    models::CausalLM& model, const ModelTensorParallel& tp, models::InferenceWeights weights,
    const std::function<bool(const std::string&)>& keep = {});

}  // namespace tessel::train
