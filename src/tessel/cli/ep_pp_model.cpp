// SPDX-License-Identifier: Apache-2.0
// Loading this rank's expert-parallel share of its pipeline stage (ep_pp_model.h).
#include "tessel/cli/ep_pp_model.h"

#include "tessel/core/error.h"
#include "tessel/models/gguf_model.h"
#include "tessel/train/model_ep_load.h"

namespace tessel::cli {

PpRankModel load_ep_pp_rank_model(const std::string& model, models::InferenceWeights weights,
                                  const dist::CommPtr& world, int ep, int microbatches,
                                  serve::PipelineStageModel::LogitsTo logits_to,
                                  const std::function<void(const std::string&)>& note) {
  TESSEL_CHECK(ep >= 1 && world->size() % ep == 0,
               "expert-parallel pipeline stages: ", world->size(), " ranks for --ep ", ep);
  PpRankModel out;
  out.stage = world->rank() / ep;
  const int ep_index = world->rank() % ep, stages = world->size() / ep;
  // The same ep index across the stages passes the hidden states on; the stage's ranks share its
  // MoE layers' experts.
  const dist::CommPtr pipe = world->split(ep_index, out.stage, "pp");
  const dist::CommPtr ep_group = world->split(out.stage, ep_index, "ep");
  const PpStage stage = pp_stage(model, stages, out.stage);
  const bool gguf = models::is_gguf_model(model);
  train::EpLoadedModel loaded =
      gguf ? train::load_gguf_model_ep(model, ep_group, nullptr, note, stage.holds,
                                       "pipeline and expert parallelism")
           : train::load_model_ep(model, ep_group, nullptr, note, stage.holds);
  note("expert parallel: " + std::to_string(loaded.layers) + " MoE layers, the experts of each " +
       "stage's split over its " + std::to_string(ep) + " ranks");
  out.values_read = loaded.values_read;
  out.bytes_read = loaded.bytes_read;
  out.share = (gguf ? "read " + std::to_string(loaded.bytes_read) + " of the file's " +
                          std::to_string(loaded.file_bytes) + " tensor bytes"
                    : "read " + std::to_string(loaded.values_read) + " weight values") +
              " (its stage, ep rank " + std::to_string(ep_index) + "), holds " +
              std::to_string(loaded.expert_bytes) + " expert bytes";
  if (weights != models::InferenceWeights::Stored) {
    // The stage's dense matrices and routers, as one process converts them (the expert stacks
    // stay as stored, docs/MOE.md "Inference").
    const models::WeightConversion c =
        models::convert_inference_weights(*loaded.model, weights, {}, stage.holds);
    out.share += "; --weights " + std::string(models::inference_weights_name(weights)) + ": " +
                 std::to_string(c.converted) + " of its matrices converted";
  }
  out.model = std::make_shared<serve::PipelineStageModel>(loaded.model, pipe, stage.bounds,
                                                          microbatches, logits_to);
  out.model->eval();
  return out;
}

}  // namespace tessel::cli
