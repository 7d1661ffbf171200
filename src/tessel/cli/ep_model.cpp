// SPDX-License-Identifier: Apache-2.0
// Starting and loading the expert-parallel share of generate and serve (ep_model.h).
#include "tessel/cli/ep_model.h"

#include "tessel/cli/job_refusal.h"
#include "tessel/cli/pp_model.h"
#include "tessel/core/error.h"
#include "tessel/dist/world.h"
#include "tessel/models/gguf_model.h"
#include "tessel/train/model_ep_load.h"
#include "tessel/train/model_tp_load.h"

namespace tessel::cli {

dist::CommPtr start_expert_parallel(const std::string& model, int ep, int tp,
                                    const std::string& what, int pp, int microbatches) {
  TESSEL_CHECK(ep >= 1, what, ": --ep ", ep, " must be >= 1");
  TESSEL_CHECK(tp >= 1, what, ": --tp ", tp, " must be >= 1");
  TESSEL_CHECK(pp >= 1, what, ": --pp ", pp, " must be >= 1");
  if (ep == 1) return nullptr;
  const int ranks = ep * tp * pp;
  const dist::LaunchInfo launch = dist::detect_launch();
  const std::string flags = "--ep " + std::to_string(ep) +
                            (tp > 1 ? " --tp " + std::to_string(tp) : "") +
                            (pp > 1 ? " --pp " + std::to_string(pp) : "");
  TESSEL_CHECK(launch.size == ranks, what, ": ", flags, " needs ", ranks,
               " ranks, but the job has ", launch.size, " (", launch.describe(),
               "); start it with mpirun -np ", ranks, " tessel ", what, " ", flags);
  dist::CommPtr world = dist::init_world();
  check_on_every_rank(world, [&] {
    std::string error;
    try {
      error = models::is_gguf_model(model) ? train::expert_parallel_gguf_error(model, ep)
                                           : train::expert_parallel_load_error(model, ep);
      if (error.empty() && tp > 1)
        (void)models::inference_tensor_parallel(*models::load_model_source_config(model), tp);
      if (error.empty() && pp > 1) check_pp_request(model, 1, pp, microbatches, what);
    } catch (const Error& e) {
      error = e.what();
    }
    if (!error.empty()) throw Error(what + ": " + error);
  });
  return world;
}

EpRankModel load_ep_rank_model(const std::string& model, models::InferenceWeights weights,
                               const dist::CommPtr& world, int tp,
                               const std::function<void(const std::string&)>& note) {
  const bool gguf = models::is_gguf_model(model);
  // The trainer's mesh (docs/MOE.md, "ep with tp"): tp groups of adjacent ranks, ep groups of
  // the ranks with one tp rank, so rank r is tp rank r % tp of ep rank r / tp.
  const dist::CommPtr tp_comm =
      tp > 1 ? world->split(world->rank() / tp, world->rank(), "tp") : nullptr;
  const dist::CommPtr ep_comm =
      tp > 1 ? world->split(world->rank() % tp, world->rank(), "ep") : world;
  train::EpLoadedModel loaded = gguf ? train::load_gguf_model_ep(model, ep_comm, tp_comm, note)
                                     : train::load_model_ep(model, ep_comm, tp_comm, note);
  note("expert parallel: " + std::to_string(loaded.layers) + " MoE layers, their experts split " +
       "over " + std::to_string(ep_comm->size()) + " ranks" +
       (tp > 1 ? ", each expert's FFN columns over " + std::to_string(tp) +
                     " tensor-parallel ranks (the dense parts tensor-parallel)"
               : ""));
  EpRankModel out{std::move(loaded.model), loaded.values_read, "", std::move(loaded.tp)};
  out.share = gguf ? "read " + std::to_string(loaded.bytes_read) + " of the file's " +
                         std::to_string(loaded.file_bytes) + " tensor bytes"
                   : "read " + std::to_string(loaded.values_read) + " weight values";
  if (tp > 1)
    out.share += " (ep rank " + std::to_string(ep_comm->rank()) + ", tp rank " +
                 std::to_string(tp_comm->rank()) + ")";
  if (loaded.expert_bytes > 0)
    out.share += ", holds " + std::to_string(loaded.expert_bytes) + " expert bytes";
  // Every rank converts what it holds as one process would (the dense matrices and the router;
  // the expert stacks stay as stored, docs/MOE.md "Inference"); under tp with the whole rows'
  // int8 scales. Stored too: the quantized matrices take their backend's layout.
  const models::WeightConversion c =
      out.tp ? train::convert_inference_weights_tp(*out.model, *out.tp, weights)
             : models::convert_inference_weights(*out.model, weights);
  if (weights != models::InferenceWeights::Stored) {
    note("--weights " + std::string(models::inference_weights_name(weights)) + ": " +
         std::to_string(c.converted) + " matrices converted on every rank");
  }
  return out;
}

std::shared_ptr<serve::StepMirror> expert_parallel_step_mirror(const dist::CommPtr& world,
                                                               const EpRankModel& rank) {
  if (!rank.tp)
    return std::make_shared<serve::StepMirror>(world, [](const Tensor& whole) { return whole; });
  // The LM head is split over tp: each tp group gathers its vocabulary columns.
  return std::make_shared<serve::StepMirror>(world, [tp = rank.tp](const Tensor& local) {
    return train::model_tp_full_logits(*tp, local);
  });
}

}  // namespace tessel::cli
