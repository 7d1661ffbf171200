// SPDX-License-Identifier: Apache-2.0
// Loading a mixture-of-experts model directory into this rank's expert-parallel share
// (model_ep_load.h).
#include "tessel/train/model_ep_load.h"

#include <filesystem>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/nn/init.h"
#include "tessel/nn/moe.h"
#include "tessel/parallel/expert/expert_inference.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"
#include "tessel/train/checkpoint/safetensors_regions.h"
#include "tessel/train/model_expert_pieces.h"

namespace tessel::train {

namespace {

models::ConfigPtr read_config(const std::string& dir) {
  const std::filesystem::path config_path = std::filesystem::path(dir) / "config.json";
  TESSEL_CHECK(std::filesystem::exists(config_path), "load model: ", config_path.string(),
               " not found");
  return models::load_model_config(config_path.string());
}

}  // namespace

std::string expert_parallel_load_error(const std::string& dir, int ep) {
  if (ep < 1) return "expert parallel: --ep must be >= 1, got " + std::to_string(ep);
  // Shape-only: the layers' configs are all that is looked at.
  return parallel::expert_inference_error(*read_config(dir)->build_empty(), ep);
}

EpLoadedModel load_model_ep(const std::string& dir, const dist::CommPtr& ep,
                            const dist::CommPtr& tp,
                            const std::function<void(const std::string&)>& note,
                            const std::function<bool(const std::string&)>& keep) {
  const models::ConfigPtr config = read_config(dir);
  if (tp) (void)models::inference_tensor_parallel(*config, tp->size());
  EpLoadedModel out;
  if (tp || keep) {
    // Shape-only (no bytes, no address space), as load_model_tp builds it: the plan's cut then
    // makes shape-only pieces, filled below (only the kept ones: another stage's never are).
    nn::init::InitRecord unused;
    nn::init::DeferInit defer(unused);
    out.model = config->build_empty();
  } else {
    out.model = config->build_empty();  // allocated, never touched: filled below
  }
  auto checkpoint = std::make_shared<const io::SafetensorsCheckpoint>(
      io::SafetensorsCheckpoint::open(dir, io::SafetensorsLoad::Read));
  // The layout describes the whole model's tensors, so it is taken before the cut.
  const RegionSource regions =
      safetensors_region_source(checkpoint, config->family().hf_layout(*out.model, *checkpoint));
  if (tp)
    out.tp = std::make_shared<ModelTensorParallel>(
        parallelize_model(*out.model, tp, "", false, note, /*copy_values=*/false));
  // The whole stacked expert tensors are released first, so that keeping this rank's experts (and,
  // under tp, its FFN columns of them) makes shape-only pieces instead of copying (and so
  // touching) the whole ones: the peak is then this rank's share, not the share plus the pages
  // the copy read.
  for (auto& [name, module] : out.model->named_modules())
    if (auto* moe = dynamic_cast<nn::MoE*>(module))
      for (auto& [param, t] : moe->experts->named_parameters()) t.storage().release();
  const parallel::ExpertParallelResult split =
      parallel::parallelize_experts_inference(*out.model, ep);
  out.layers = split.layers;
  ExpertPieces pieces = split_experts_over_tp(*out.model, tp);
  pieces.ep_size = ep->size();
  pieces.ep_rank = ep->rank();
  for (size_t i = 0; i < split.params.size(); ++i)
    pieces.experts[split.params[i]] = split.experts[i];

  int64_t values = 0;
  const RegionSource counted = [&](const std::string& name, const PieceRegion& region, float* dst) {
    values += region.numel();
    regions(name, region, dst);
  };
  autograd::NoGradGuard no_grad;
  for (const auto& [name, param] : out.model->named_parameters()) {
    if (keep && !keep(name)) continue;
    const sharding::LocalLayout placement = pieces.placement(out.tp.get(), name, param.shape());
    param.storage().materialize();
    const bool direct = param.dtype() == DType::F32;
    Tensor flat = direct ? param.detach().flatten() : empty({param.numel()}, DType::F32);
    fill_placed(counted, name, placement, param.shape(), 0, param.numel(), flat);
    if (!direct) param.detach().copy_from(flat.reshape(param.shape()));
  }
  out.values_read = values;
  out.expert_bytes = expert_parameter_bytes(*out.model, keep);
  out.model->eval();
  return out;
}

}  // namespace tessel::train
