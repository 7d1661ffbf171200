// SPDX-License-Identifier: Apache-2.0
// A mixture-of-experts model directory loaded straight into this rank's expert-parallel share for
// inference (parallel/expert/expert_inference.h): the model is built without values, every MoE
// layer keeps only this rank's num_experts / ep experts, and the rank reads from the safetensors
// files the dense tensors whole and, of the stacked expert tensors, only its experts' stored
// tensors (train/checkpoint/safetensors_regions.h). DeepSpeed-MoE's placement for inference: the
// expert weights, most of a sparse MoE model, are spread over the ranks, so each rank's resident
// memory is the dense part plus 1 / ep of the experts.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/models/causal_lm.h"

namespace tessel::train {

struct EpLoadedModel {
  std::shared_ptr<models::CausalLM> model;  // this rank's share, in eval mode
  int64_t values_read = 0;                  // weight values this rank read from the files
  int64_t layers = 0;                       // MoE layers split
};

// The one clear refusal of splitting the model of `dir`/config.json over `ep` ranks ("" when
// it can be): no MoE layer, or a layer whose expert count ep does not divide. Reads no weight.
std::string expert_parallel_load_error(const std::string& dir, int ep);

// `dir` holds config.json and safetensors weights (a model directory or a whole-model tessel
// checkpoint). Collective over `ep` (the MoE layers' dispatch gathers over it in every forward).
EpLoadedModel load_model_ep(const std::string& dir, const dist::CommPtr& ep);

}  // namespace tessel::train
