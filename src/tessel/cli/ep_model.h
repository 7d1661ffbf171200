// SPDX-License-Identifier: Apache-2.0
// This rank's share of a mixture-of-experts model for `tessel generate --ep N` and
// `tessel serve --ep N` (docs/MOE.md, "Expert-parallel inference"): the dense weights whole and
// num_experts / N experts of every MoE layer, read from a model directory piece by piece
// (train/model_ep_load.h); every rank runs every forward over the same tokens and the layers
// gather their experts' rows (parallel/expert/expert_inference.h), so every rank ends each forward
// with the logits one process computes. With --tp T as well (np = N·T) the dense parts are
// tensor-parallel within each ep group and each expert's FFN columns split over tp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/models/causal_lm.h"
#include "tessel/models/inference_weights.h"
#include "tessel/serve/step_mirror.h"
#include "tessel/train/model_tensor_parallel.h"

namespace tessel::cli {

// --ep N [--tp T] [--pp P]: checks the job's size (mpirun -np N·T·P) and that the model (a
// safetensors directory or a GGUF file) has MoE layers that N divides and, with --tp,
// that the family's plan and the experts' FFN width take T, with --pp that it has P blocks
// (cli/ep_pp_model.h), before any weight is read; returns the world, or null for N = 1. A model
// that cannot be split fails identically on every rank: only rank 0 reports it (the others wait
// to be ended by its abort), so the job prints one error.
dist::CommPtr start_expert_parallel(const std::string& model, int ep, int tp,
                                    const std::string& what, int pp = 1, int microbatches = 1);

struct EpRankModel {
  std::shared_ptr<models::CausalLM> model;  // this rank's share, in eval mode
  int64_t values_read = 0;                  // weight values read from the model directory
  // What the rank read, for its one line: "read N weight values" (a model directory) or "read B
  // of the file's F tensor bytes" (a GGUF file).
  std::string share;
  // Under --tp: the dense parts' split (the logits are this rank's vocabulary columns).
  std::shared_ptr<train::ModelTensorParallel> tp;
};

// Collective over `world` (of ep · tp ranks). `note` receives the one-line notices meant to be
// printed once for the job (the caller prints them on rank 0).
EpRankModel load_ep_rank_model(const std::string& model, models::InferenceWeights weights,
                               const dist::CommPtr& world, int tp,
                               const std::function<void(const std::string&)>& note);

// Serving: the step mirror of an expert-parallel group. Without tp every rank computes whole
// logits, so the gather of the sampled rows is the identity; with tp each tp group gathers its
// vocabulary columns.
std::shared_ptr<serve::StepMirror> expert_parallel_step_mirror(const dist::CommPtr& world,
                                                               const EpRankModel& rank);

}  // namespace tessel::cli
