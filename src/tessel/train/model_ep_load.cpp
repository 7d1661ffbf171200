// SPDX-License-Identifier: Apache-2.0
// Loading a mixture-of-experts model directory into this rank's expert-parallel share
// (model_ep_load.h).
#include "tessel/train/model_ep_load.h"

#include <filesystem>
#include <map>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/nn/moe.h"
#include "tessel/parallel/expert/expert_inference.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"
#include "tessel/train/checkpoint/safetensors_regions.h"

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

EpLoadedModel load_model_ep(const std::string& dir, const dist::CommPtr& ep) {
  const models::ConfigPtr config = read_config(dir);
  EpLoadedModel out;
  // Built without values: every tensor is filled from the files below, the experts after the cut.
  out.model = config->build_empty();
  auto checkpoint = std::make_shared<const io::SafetensorsCheckpoint>(
      io::SafetensorsCheckpoint::open(dir, io::SafetensorsLoad::Read));
  // The layout describes the whole model's tensors, so it is taken before the cut.
  const RegionSource regions =
      safetensors_region_source(checkpoint, config->family().hf_layout(*out.model, *checkpoint));
  // The whole stacked expert tensors are released first, so that keeping this rank's experts
  // makes shape-only pieces instead of copying (and so touching) the untouched whole ones: the
  // peak is then this rank's share, not the share plus the pages the copy read.
  for (auto& [name, module] : out.model->named_modules())
    if (auto* moe = dynamic_cast<nn::MoE*>(module))
      for (auto& [param, t] : moe->experts->named_parameters()) t.storage().release();
  const parallel::ExpertParallelResult split =
      parallel::parallelize_experts_inference(*out.model, ep);
  out.layers = split.layers;
  std::map<std::string, int64_t> experts_of;  // expert parameter -> the layer's expert count
  for (size_t i = 0; i < split.params.size(); ++i) experts_of[split.params[i]] = split.experts[i];

  int64_t values = 0;
  const RegionSource counted = [&](const std::string& name, const PieceRegion& region, float* dst) {
    values += region.numel();
    regions(name, region, dst);
  };
  autograd::NoGradGuard no_grad;
  for (const auto& [name, param] : out.model->named_parameters()) {
    sharding::LocalLayout placement = sharding::LocalLayout::whole(param.shape());
    if (const auto it = experts_of.find(name); it != experts_of.end()) {
      // Rank r's experts are rows [r E / ep, (r + 1) E / ep) of the stacked [E, ...] tensor.
      sharding::ShardLayout spec;
      spec.dim = 0;
      spec.full = it->second;
      placement = sharding::LocalLayout::of(spec, param.shape(), ep->size(), ep->rank());
    }
    param.storage().materialize();  // the experts' pieces (a no-op for the dense tensors)
    const bool direct = param.dtype() == DType::F32;
    Tensor flat = direct ? param.detach().flatten() : empty({param.numel()}, DType::F32);
    fill_placed(counted, name, placement, param.shape(), 0, param.numel(), flat);
    if (!direct) param.detach().copy_from(flat.reshape(param.shape()));
  }
  out.values_read = values;
  out.model->eval();
  return out;
}

}  // namespace tessel::train
