// SPDX-License-Identifier: Apache-2.0
// This rank's share of a model for `tessel generate --tp N` and `tessel serve --tp N`: a model
// directory is read piece by piece (each rank reads only the byte ranges of the pieces it holds,
// train/model_tp_load.h), a GGUF file likewise from its mapping, its quantized matrices kept as
// blocks (train/model_tp_load_gguf.h); then `--weights` converts the pieces (int8 with the whole
// rows' scales). Both commands thus hold and read the same share.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/models/causal_lm.h"
#include "tessel/models/inference_weights.h"
#include "tessel/train/model_tensor_parallel.h"

namespace tessel::cli {

struct TpRankModel {
  std::shared_ptr<models::CausalLM> model;  // this rank's share, in eval mode
  std::shared_ptr<train::ModelTensorParallel> tp;
  int64_t values_read = -1;  // weight values read from a model directory (-1: a GGUF)
  std::string share;         // what this rank read, for its one line ("read 123 weight values ...")
};

// Collective over `world`. `what` names the command in errors and lines; `note` receives the
// one-line notices meant to be printed once for the job (the caller prints them on rank 0).
TpRankModel load_tp_rank_model(const std::string& model, models::InferenceWeights weights,
                               const dist::CommPtr& world, const std::string& what,
                               const std::function<void(const std::string&)>& note);

}  // namespace tessel::cli
