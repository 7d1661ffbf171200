// SPDX-License-Identifier: Apache-2.0
// Loading this rank's pipeline stage for generate and serve (pp_model.h).
#include "tessel/cli/pp_model.h"

#include <algorithm>
#include <filesystem>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/models/gguf_model.h"
#include "tessel/parallel/pipeline/partition.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"
#include "tessel/train/checkpoint/safetensors_regions.h"

namespace tessel::cli {

void check_pp_request(const std::string& model, models::InferenceWeights weights, int tp, int pp,
                      int microbatches, const std::string& what) {
  TESSEL_CHECK(pp >= 1, what, ": --pp ", pp, " must be >= 1");
  TESSEL_CHECK(microbatches >= 1, what, ": --pp-microbatches ", microbatches, " must be >= 1");
  if (pp == 1) return;
  TESSEL_CHECK(tp == 1, what, ": --tp ", tp, " with --pp ", pp,
               " is not supported yet; use one of them");
  TESSEL_CHECK(!models::is_gguf_model(model), what, ": --pp: ", model,
               " is a GGUF file, which is not cut into pipeline stages; use the safetensors model "
               "directory");
  TESSEL_CHECK(weights == models::InferenceWeights::Stored, what, ": --pp with --weights ",
               models::inference_weights_name(weights),
               " is not supported; use --weights stored (or --tp for converted weights)");
  const int64_t blocks = models::load_model_source_config(model)->num_layers();
  TESSEL_CHECK(blocks >= pp, what, ": --pp ", pp, " stages for a model of ", blocks,
               " blocks (each stage needs one)");
}

std::vector<int64_t> pp_stage_bounds(const std::vector<double>& layer_costs, int64_t blocks,
                                     int stages) {
  namespace pp = parallel::pipeline;
  TESSEL_CHECK(int64_t(layer_costs.size()) == blocks + 2 && stages >= 1 && stages <= blocks,
               "pp_stage_bounds: ", layer_costs.size(), " layer costs, ", blocks, " blocks, ",
               stages, " stages");
  std::vector<pp::LayerCost> costs;
  for (size_t i = 0; i < layer_costs.size(); ++i)
    costs.push_back({std::to_string(i), layer_costs[i]});
  // Pipeline layer l + 1 is block l; the embedding (layer 0) stays with the first stage and the
  // head (layer blocks + 1) with the last whatever the partition says.
  std::vector<int64_t> bounds{0};
  const pp::StagePartition whole = pp::balance(costs, stages);
  for (int s = 1; s < stages; ++s)
    bounds.push_back(std::clamp<int64_t>(whole.first[size_t(s)] - 1, 0, blocks));
  bounds.push_back(blocks);
  bool every_stage_has_a_block = true;
  for (size_t s = 0; s + 1 < bounds.size(); ++s)
    every_stage_has_a_block = every_stage_has_a_block && bounds[s] < bounds[s + 1];
  if (every_stage_has_a_block) return bounds;
  // A heavy embedding or head took a stage alone: balance the blocks among themselves.
  std::vector<pp::LayerCost> block_costs;
  for (int64_t i = 0; i < blocks; ++i)
    block_costs.push_back({std::to_string(i), layer_costs[size_t(i + 1)]});
  const pp::StagePartition part = pp::balance(block_costs, stages);
  bounds.assign(part.first.begin(), part.first.end());
  bounds.push_back(blocks);
  return bounds;
}

PpRankModel load_pp_rank_model(const std::string& model, const dist::CommPtr& world,
                               int microbatches, serve::PipelineStageModel::LogitsTo logits_to) {
  const std::filesystem::path config_path = std::filesystem::path(model) / "config.json";
  TESSEL_CHECK(std::filesystem::exists(config_path), "load model: ", config_path.string(),
               " not found");
  const models::ConfigPtr config = models::load_model_config(config_path.string());
  // Built without values: the other stages' tensors are allocated but never touched, so they
  // never become resident; this stage's are filled from the files below.
  std::shared_ptr<models::CausalLM> whole = config->build_empty();
  const int64_t blocks = whole->num_layers();
  const std::vector<int64_t> bounds = pp_stage_bounds(whole->layer_costs(), blocks, world->size());
  const int64_t first = bounds[size_t(world->rank())], last = bounds[size_t(world->rank()) + 1];
  const bool first_stage = world->rank() == 0, last_stage = world->rank() == world->size() - 1;
  auto checkpoint = std::make_shared<const io::SafetensorsCheckpoint>(
      io::SafetensorsCheckpoint::open(model, io::SafetensorsLoad::Read));
  const train::RegionSource regions = train::safetensors_region_source(
      checkpoint, config->family().hf_layout(*whole, *checkpoint));
  std::vector<std::string> tied = whole->head_tied_parameters();
  PpRankModel out;
  autograd::NoGradGuard no_grad;
  for (const auto& [name, param] : whole->named_parameters()) {
    const int64_t layer = whole->layer_of_parameter(name);  // 0 embedding, l + 1 block l
    const bool mine = (layer == 0 && first_stage) || (layer == blocks + 1 && last_stage) ||
                      (layer >= first + 1 && layer <= last) ||
                      (last_stage && std::find(tied.begin(), tied.end(), name) != tied.end());
    if (!mine) continue;
    const bool direct = param.dtype() == DType::F32;
    Tensor flat = direct ? param.detach().flatten() : empty({param.numel()}, DType::F32);
    train::fill_placed(regions, name, sharding::LocalLayout::whole(param.shape()), param.shape(), 0,
                       param.numel(), flat);
    if (!direct) param.detach().copy_from(flat.reshape(param.shape()));
    out.values_read += param.numel();
  }
  whole->eval();
  out.model = std::make_shared<serve::PipelineStageModel>(whole, world, bounds, microbatches,
                                                          logits_to);
  out.model->eval();
  return out;
}

}  // namespace tessel::cli
