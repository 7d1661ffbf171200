// SPDX-License-Identifier: Apache-2.0
// Starting and loading the expert-parallel share of generate and serve (ep_model.h).
#include "tessel/cli/ep_model.h"

#include "tessel/core/error.h"
#include "tessel/dist/world.h"
#include "tessel/models/gguf_model.h"
#include "tessel/train/model_ep_load.h"

namespace tessel::cli {

dist::CommPtr start_expert_parallel(const std::string& model, int ep, int tp,
                                    const std::string& what) {
  TESSEL_CHECK(ep >= 1, what, ": --ep ", ep, " must be >= 1");
  if (ep == 1) return nullptr;
  const dist::LaunchInfo launch = dist::detect_launch();
  TESSEL_CHECK(launch.size == ep, what, ": --ep ", ep, " ranks, but the job has ", launch.size,
               " (", launch.describe(), "); start it with mpirun -np ", ep, " tessel ", what,
               " --ep ", ep);
  dist::CommPtr world = dist::init_world();
  std::string error;
  if (tp != 1) {
    error = "--ep " + std::to_string(ep) + " with --tp " + std::to_string(tp) +
            " is not supported; give one of them";
  } else {
    try {
      error = models::is_gguf_model(model) ? train::expert_parallel_gguf_error(model, ep)
                                           : train::expert_parallel_load_error(model, ep);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  if (!error.empty()) {
    if (world->rank() != 0) world->barrier();  // never completes: rank 0 ends the job
    throw Error(what + ": " + error);
  }
  return world;
}

EpRankModel load_ep_rank_model(const std::string& model, models::InferenceWeights weights,
                               const dist::CommPtr& world,
                               const std::function<void(const std::string&)>& note) {
  const bool gguf = models::is_gguf_model(model);
  train::EpLoadedModel loaded =
      gguf ? train::load_gguf_model_ep(model, world) : train::load_model_ep(model, world);
  note("expert parallel: " + std::to_string(loaded.layers) + " MoE layers, their experts split " +
       "over " + std::to_string(world->size()) + " ranks");
  EpRankModel out{std::move(loaded.model), loaded.values_read, ""};
  out.share = gguf ? "read " + std::to_string(loaded.bytes_read) + " of the file's " +
                         std::to_string(loaded.file_bytes) + " tensor bytes"
                   : "read " + std::to_string(loaded.values_read) + " weight values";
  if (weights != models::InferenceWeights::Stored) {
    // Every rank converts what it holds as one process would (the dense matrices and the router;
    // the expert stacks stay as stored, docs/MOE.md "Inference").
    const models::WeightConversion c = models::convert_inference_weights(*out.model, weights);
    note("--weights " + std::string(models::inference_weights_name(weights)) + ": " +
         std::to_string(c.converted) + " matrices converted on every rank");
  }
  return out;
}

std::shared_ptr<serve::StepMirror> expert_parallel_step_mirror(const dist::CommPtr& world) {
  return std::make_shared<serve::StepMirror>(world, [](const Tensor& whole) { return whole; });
}

}  // namespace tessel::cli
