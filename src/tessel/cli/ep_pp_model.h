// SPDX-License-Identifier: Apache-2.0
// This rank's part of a mixture-of-experts model for `tessel generate|serve --ep E --pp P [--tp T]`
// under `mpirun -np P·E·T`: expert parallelism inside each pipeline stage. The P·E·T ranks form P
// stages of E·T ranks (world rank = stage · E·T + ep index · T + tp index: inside a stage the
// layout of --ep with --tp, cli/ep_model.h; across stages that of --pp with --tp): the stage's
// blocks are cut as --pp cuts them (cli/pp_model.h), every rank of a stage holds the stage's dense
// weights whole (without --tp) and E⁻¹ of the experts of each of its MoE layers (DeepSpeed-MoE's
// inference placement, train/model_ep_load.h, reading only those), and the ranks of one place in
// their stages pass the hidden states on (serve/pipeline_stage_model.h). The ranks of a stage run
// the same tokens, so each MoE layer's dispatch (parallel/expert/expert_inference.h) gathers its
// experts' rows over the stage's ep group alone; every rank of the last stage ends with whole
// logits. Nothing is summed in another order, so tokens and logprobs equal one process's bitwise.
// With --tp T each stage's dense parts are split by the family's tensor-parallel plan over the
// ranks of one ep index and each of its experts' FFN columns over them (train/model_ep_load.h): a
// rank holds its stage's E⁻¹ of the experts × T⁻¹ of their columns; the last stage's tp groups
// gather the vocabulary columns of the logits. The sums over tp come in another order than one
// process's (logprobs within rounding, greedy tokens alike).
#pragma once

#include <functional>
#include <string>

#include "tessel/cli/pp_model.h"
#include "tessel/dist/communicator.h"
#include "tessel/models/inference_weights.h"
#include "tessel/serve/pipeline_stage_model.h"

namespace tessel::cli {

// Collective over `world` (of pp · ep · tp ranks, checked by start_expert_parallel). `note`
// receives the one-line notices meant for the job (the caller prints them on rank 0).
PpRankModel load_ep_pp_rank_model(const std::string& model, models::InferenceWeights weights,
                                  const dist::CommPtr& world, int ep, int tp, int microbatches,
                                  serve::PipelineStageModel::LogitsTo logits_to,
                                  const std::function<void(const std::string&)>& note);

}  // namespace tessel::cli
