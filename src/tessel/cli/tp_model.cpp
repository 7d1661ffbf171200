// SPDX-License-Identifier: Apache-2.0
// Loading this rank's tensor-parallel share for generate and serve (tp_model.h).
#include "tessel/cli/tp_model.h"

#include "tessel/core/error.h"
#include "tessel/models/gguf_model.h"
#include "tessel/nn/layers.h"
#include "tessel/train/model_tp_load.h"

namespace tessel::cli {

namespace {

// GGUF matrices kept as their blocks (quantized, or F16 / BF16) are not split by the tp styles,
// which cut float rows and columns; one clear error instead of the styles' shape check.
void check_float_matrices(models::CausalLM& model, const std::string& source,
                          const std::string& what) {
  for (auto& [name, module] : model.named_modules()) {
    const auto* linear = dynamic_cast<const nn::Linear*>(module);
    const auto* embedding = dynamic_cast<const nn::Embedding*>(module);
    const auto type =
        linear ? linear->quant_type() : (embedding ? embedding->quant_type() : std::nullopt);
    TESSEL_CHECK(!type, what, ": --tp: ", source, " holds '", name, "' as GGUF ",
                 kernels::quant::quant_type_name(*type),
                 " blocks, which tensor parallelism does not split; serve an F32 GGUF or the "
                 "safetensors model directory (with --weights int8|bf16|f16 if wanted)");
  }
}

}  // namespace

TpRankModel load_tp_rank_model(const std::string& model, models::InferenceWeights weights,
                               const dist::CommPtr& world, const std::string& what,
                               const std::function<void(const std::string&)>& note) {
  TpRankModel out;
  if (models::is_gguf_model(model)) {
    // GGUF blocks are read whole, then cut.
    out.model = models::load_model_source(model);
    check_float_matrices(*out.model, model, what);
    out.tp = std::make_shared<train::ModelTensorParallel>(
        train::parallelize_model(*out.model, world, "", false, note));
    out.model->eval();
  } else {
    train::TpLoadedModel loaded = train::load_model_tp(model, world, note);
    out.model = std::move(loaded.model);
    out.tp = std::move(loaded.tp);
    out.values_read = loaded.values_read;
  }
  if (weights != models::InferenceWeights::Stored) {
    const models::WeightConversion c =
        train::convert_inference_weights_tp(*out.model, *out.tp, weights);
    note(
        "--weights " + std::string(models::inference_weights_name(weights)) + ": " +
        std::to_string(c.converted) + " matrices converted on every rank (each its pieces" +
        (weights == models::InferenceWeights::Int8 ? ", int8 row scales of the whole rows)" : ")"));
  }
  return out;
}

}  // namespace tessel::cli
