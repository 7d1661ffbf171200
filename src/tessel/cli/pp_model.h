// SPDX-License-Identifier: Apache-2.0
// This rank's pipeline stage for `tessel generate --pp N` and `tessel serve --pp N`: the model's
// blocks are cut into N contiguous stages balanced by their weights (the trainer's partitioner,
// parallel/pipeline/partition.h, each stage keeping at least one block), and each rank reads from
// the model directory's safetensors only the byte ranges of its stage's tensors (the embedding
// with the first stage, the final norm and the head, tied or not, with the last), as
// train/model_tp_load.h does for tensor-parallel shares. With --tp T too, the job's P x T ranks
// form P stages of T ranks (world rank = stage * T + tp index): each stage is split by the
// family's tensor-parallel plan among its ranks, and each rank reads its share of its stage's
// tensors only (a mixture of experts: its columns of each of its stage's experts, as --tp alone
// splits them). A GGUF file is read the same way through the family's GGUF layout
// (train/model_tp_load_gguf.h with the stage's filter): each rank maps the file and touches only
// its stage's tensors, quantized matrices kept as their blocks (the one-process GGUF kernels), and
// with --tp its share of them. `--weights int8|bf16|f16` converts each stage's own layers after
// loading, as one process converts all of them (each row alike, so the result equals one
// process's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/models/inference_weights.h"
#include "tessel/serve/pipeline_stage_model.h"

namespace tessel::cli {

struct PpRankModel {
  std::shared_ptr<serve::PipelineStageModel> model;  // in eval mode
  int64_t values_read = 0;  // weight values this rank read from safetensors files
  int64_t bytes_read = 0;   // tensor bytes this rank read from a GGUF file
  int stage = 0, tp_index = 0;
  // What this rank read (and converted), for its log line: "read 1234 weight values (its stage)".
  std::string share;
};

// Refuses what --pp does not support, before any weight is read: fewer blocks than stages, a
// model the --tp plan cannot split, microbatches < 1. `what` names the command.
void check_pp_request(const std::string& model, int tp, int pp, int microbatches,
                      const std::string& what);

// The stage bounds of `blocks` blocks over `stages` ranks for a model whose pipeline layers cost
// `layer_costs` (embedding, blocks..., head): stages + 1 entries, see PipelineStageModel.
std::vector<int64_t> pp_stage_bounds(const std::vector<double>& layer_costs, int64_t blocks,
                                     int stages);

// Stage `stage` of `stages` for the model `model` (a directory or a GGUF file) describes: the
// stage bounds (stages + 1 entries) and which parameters the stage holds (its blocks', the
// embedding with the first stage, the final norm and the head with the last). Reads no weight.
struct PpStage {
  std::vector<int64_t> bounds;
  std::function<bool(const std::string&)> holds;
};
PpStage pp_stage(const std::string& model, int stages, int stage);

// Collective over `world` (of pp x tp ranks; rank r runs stage r / tp). `note` receives the
// tensor-parallel plan's one-line notices.
PpRankModel load_pp_rank_model(const std::string& model, models::InferenceWeights weights,
                               const dist::CommPtr& world, int tp, int microbatches,
                               serve::PipelineStageModel::LogitsTo logits_to,
                               const std::function<void(const std::string&)>& note = {});

}  // namespace tessel::cli
