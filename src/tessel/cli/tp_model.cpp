// SPDX-License-Identifier: Apache-2.0
// Loading this rank's tensor-parallel share for generate and serve (tp_model.h).
#include "tessel/cli/tp_model.h"

#include "tessel/models/gguf_model.h"
#include "tessel/train/model_tp_load.h"
#include "tessel/train/model_tp_load_gguf.h"

namespace tessel::cli {

TpRankModel load_tp_rank_model(const std::string& model, models::InferenceWeights weights,
                               const dist::CommPtr& world, const std::string& what,
                               const std::function<void(const std::string&)>& note) {
  TpRankModel out;
  if (models::is_gguf_model(model)) {
    // Each rank maps the file and reads its pieces, quantized blocks kept as they are.
    train::TpGgufLoaded loaded = train::load_gguf_model_tp(model, world, note);
    out.model = std::move(loaded.model);
    out.tp = std::move(loaded.tp);
    out.share = "read " + std::to_string(loaded.bytes_read) + " of the file's " +
                std::to_string(loaded.file_bytes) + " tensor bytes (its share; " +
                std::to_string(loaded.views) + " matrices as views of the mapped file, " +
                std::to_string(loaded.copies) + " copied)";
    if (loaded.expert_bytes > 0)
      out.share += ", holds " + std::to_string(loaded.expert_bytes) + " expert bytes";
  } else {
    train::TpLoadedModel loaded = train::load_model_tp(model, world, note);
    out.model = std::move(loaded.model);
    out.tp = std::move(loaded.tp);
    out.values_read = loaded.values_read;
    out.share = "read " + std::to_string(loaded.values_read) + " weight values (its share)";
    if (loaded.expert_bytes > 0)
      out.share += ", holds " + std::to_string(loaded.expert_bytes) + " expert bytes";
  }
  // Stored too: the quantized pieces take their backend's layout (models/inference_weights.h).
  const models::WeightConversion c =
      train::convert_inference_weights_tp(*out.model, *out.tp, weights);
  if (weights != models::InferenceWeights::Stored) {
    note(
        "--weights " + std::string(models::inference_weights_name(weights)) + ": " +
        std::to_string(c.converted) + " matrices converted on every rank (each its pieces" +
        (weights == models::InferenceWeights::Int8 ? ", int8 row scales of the whole rows)" : ")"));
  }
  return out;
}

}  // namespace tessel::cli
