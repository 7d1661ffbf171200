// SPDX-License-Identifier: Apache-2.0
// Loading this rank's expert-parallel share of its pipeline stage (ep_pp_model.h).
#include "tessel/cli/ep_pp_model.h"

#include "tessel/core/error.h"
#include "tessel/models/gguf_model.h"
#include "tessel/train/model_ep_load.h"
#include "tessel/train/model_tp_load.h"

namespace tessel::cli {

PpRankModel load_ep_pp_rank_model(const std::string& model, models::InferenceWeights weights,
                                  const dist::CommPtr& world, int ep, int tp, int microbatches,
                                  serve::PipelineStageModel::LogitsTo logits_to,
                                  const std::function<void(const std::string&)>& note) {
  TESSEL_CHECK(ep >= 1 && tp >= 1 && world->size() % (ep * tp) == 0,
               "expert-parallel pipeline stages: ", world->size(), " ranks for --ep ", ep, " --tp ",
               tp);
  PpRankModel out;
  const int per_stage = ep * tp, stages = world->size() / per_stage;
  out.stage = world->rank() / per_stage;
  // Inside a stage the layout of --ep with --tp (ep_model.h): tp groups of adjacent ranks.
  const int in_stage = world->rank() % per_stage, ep_index = in_stage / tp;
  out.tp_index = in_stage % tp;
  // The same place in every stage passes the hidden states on; the stage's ranks with one tp
  // index share its MoE layers' experts, the ranks with one ep index split its dense parts.
  const dist::CommPtr pipe = world->split(in_stage, out.stage, "pp");
  const dist::CommPtr ep_group = world->split(out.stage * tp + out.tp_index, world->rank(), "ep");
  const dist::CommPtr tp_group =
      tp > 1 ? world->split(out.stage * ep + ep_index, world->rank(), "tp") : nullptr;
  const PpStage stage = pp_stage(model, stages, out.stage);
  const bool gguf = models::is_gguf_model(model);
  train::EpLoadedModel loaded =
      gguf ? train::load_gguf_model_ep(model, ep_group, tp_group, note, stage.holds,
                                       tp > 1 ? "pipeline, expert and tensor parallelism"
                                              : "pipeline and expert parallelism")
           : train::load_model_ep(model, ep_group, tp_group, note, stage.holds);
  note("expert parallel: " + std::to_string(loaded.layers) + " MoE layers, the experts of each " +
       "stage's split over its " + std::to_string(ep) + " ranks" +
       (tp > 1 ? ", each expert's FFN columns over " + std::to_string(tp) +
                     " tensor-parallel ranks (the stage's dense parts tensor-parallel)"
               : ""));
  out.values_read = loaded.values_read;
  out.bytes_read = loaded.bytes_read;
  out.share = (gguf ? "read " + std::to_string(loaded.bytes_read) + " of the file's " +
                          std::to_string(loaded.file_bytes) + " tensor bytes"
                    : "read " + std::to_string(loaded.values_read) + " weight values") +
              " (its stage, ep rank " + std::to_string(ep_index) +
              (tp > 1 ? ", tp rank " + std::to_string(out.tp_index) : "") + "), holds " +
              std::to_string(loaded.expert_bytes) + " expert bytes";
  // The stage's dense matrices and routers, as one process converts them (the expert stacks
  // stay as stored, docs/MOE.md "Inference"); under tp with the whole rows' int8 scales. Stored
  // too: the quantized matrices take their backend's layout.
  const models::WeightConversion c =
      loaded.tp
          ? train::convert_inference_weights_tp(*loaded.model, *loaded.tp, weights, stage.holds)
          : models::convert_inference_weights(*loaded.model, weights, {}, stage.holds);
  if (weights != models::InferenceWeights::Stored) {
    out.share += "; --weights " + std::string(models::inference_weights_name(weights)) + ": " +
                 std::to_string(c.converted) + " of its matrices converted";
  }
  serve::PipelineStageModel::FullLogits full_logits;
  if (loaded.tp)  // the last stage's head is split over its tp group: gather the vocabulary
    full_logits = [split = loaded.tp](const Tensor& local) {
      return train::model_tp_full_logits(*split, local);
    };
  out.model = std::make_shared<serve::PipelineStageModel>(loaded.model, pipe, stage.bounds,
                                                          microbatches, logits_to, full_logits);
  out.model->eval();
  return out;
}

}  // namespace tessel::cli
