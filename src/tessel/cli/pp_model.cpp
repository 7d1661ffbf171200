// SPDX-License-Identifier: Apache-2.0
// Loading this rank's pipeline stage for generate and serve (pp_model.h).
#include "tessel/cli/pp_model.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/models/gguf_model.h"
#include "tessel/nn/init.h"
#include "tessel/parallel/pipeline/partition.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"
#include "tessel/train/checkpoint/safetensors_regions.h"
#include "tessel/train/model_expert_pieces.h"
#include "tessel/train/model_tp_load.h"
#include "tessel/train/model_tp_load_gguf.h"

namespace tessel::cli {

void check_pp_request(const std::string& model, int tp, int pp, int microbatches,
                      const std::string& what) {
  TESSEL_CHECK(pp >= 1, what, ": --pp ", pp, " must be >= 1");
  TESSEL_CHECK(microbatches >= 1, what, ": --pp-microbatches ", microbatches, " must be >= 1");
  if (pp == 1) return;
  const models::ConfigPtr config = models::load_model_source_config(model);
  const int64_t blocks = config->num_layers();
  TESSEL_CHECK(blocks >= pp, what, ": --pp ", pp, " stages for a model of ", blocks,
               " blocks (each stage needs one)");
  // An Error when the plan cannot split it (a mixture of experts: also experts narrower than tp).
  if (tp > 1) (void)models::inference_tensor_parallel(*config, tp);
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

namespace {

// The parameters stage `stage` of `stages` reads: its blocks', the embedding with the first stage,
// the final norm and the head (and a tied head's matrix) with the last. Named up front, so the
// shape-only model asked can be dropped (its address space) before the stage is loaded.
std::function<bool(const std::string&)> stage_parameters(const models::CausalLM& whole,
                                                         const std::vector<int64_t>& bounds,
                                                         int stage) {
  const int64_t blocks = whole.num_layers();
  const int64_t first = bounds[size_t(stage)], last = bounds[size_t(stage) + 1];
  const bool first_stage = stage == 0, last_stage = stage + 2 == int(bounds.size());
  const std::vector<std::string> tied = whole.head_tied_parameters();
  auto names = std::make_shared<std::set<std::string>>();
  for (const auto& [name, param] : whole.named_parameters()) {
    const int64_t layer = whole.layer_of_parameter(name);  // 0 embedding, l + 1 block l
    if ((layer == 0 && first_stage) || (layer == blocks + 1 && last_stage) ||
        (layer >= first + 1 && layer <= last) ||
        (last_stage && std::find(tied.begin(), tied.end(), name) != tied.end()))
      names->insert(name);
  }
  return [names](const std::string& name) { return names->count(name) > 0; };
}

// The stage bounds of the job's `stages` stages for the model `config` describes, and a model of
// its shape to ask which pipeline layer each parameter belongs to. It is built shape-only
// (tensor/unallocated.h: no bytes, no address space), so a rank allocates only its stage's
// tensors: the whole model allocated untouched would count in every rank's VmPeak.
struct StagePlan {
  std::shared_ptr<models::CausalLM> shape_only;
  std::vector<int64_t> bounds;
};

StagePlan plan_stages(const models::ConfigPtr& config, int stages) {
  StagePlan plan;
  {
    nn::init::InitRecord unused;
    nn::init::DeferInit defer(unused);
    plan.shape_only = config->build_empty();
  }
  plan.bounds =
      pp_stage_bounds(plan.shape_only->layer_costs(), plan.shape_only->num_layers(), stages);
  return plan;
}

std::string converted_line(models::InferenceWeights weights, const models::WeightConversion& c) {
  if (weights == models::InferenceWeights::Stored) return "";
  return "; --weights " + std::string(models::inference_weights_name(weights)) + ": " +
         std::to_string(c.converted) + " of its matrices converted" +
         (c.kept ? ", " + std::to_string(c.kept) + " GGUF-quantized kept" : "");
}

// A mixture of experts' stage: the bytes of its MoE layers' experts (under tp, its columns of
// them), which every rank states so the tests can hold them to the formula.
std::string held_experts(int64_t bytes) {
  return bytes > 0 ? ", holds " + std::to_string(bytes) + " expert bytes" : "";
}

std::string gguf_share(const train::TpGgufLoaded& loaded) {
  return "read " + std::to_string(loaded.bytes_read) + " of the file's " +
         std::to_string(loaded.file_bytes) + " tensor bytes (its stage; " +
         std::to_string(loaded.views) + " matrices as views of the mapped file, " +
         std::to_string(loaded.copies) + " copied)";
}

// --tp with --pp: the stage's ranks split it by the tensor-parallel plan, each reading its share
// of the stage's tensors (train/model_tp_load.h or, for a GGUF file, model_tp_load_gguf.h, with a
// filter). A mixture of experts' stage has each of its experts' FFN columns split over the stage's
// ranks by the loaders (train/model_expert_pieces.h), as --tp alone splits them, and its MoE
// layers sum their down projections over the stage's tp group.
PpRankModel load_tp_stage(const std::string& model, models::InferenceWeights weights,
                          const dist::CommPtr& world, int tp, int microbatches,
                          serve::PipelineStageModel::LogitsTo logits_to,
                          const std::function<void(const std::string&)>& note) {
  TESSEL_CHECK(world->size() % tp == 0, "pipeline stages: ", world->size(), " ranks for --tp ", tp);
  PpRankModel out;
  out.stage = world->rank() / tp;
  out.tp_index = world->rank() % tp;
  const int stages = world->size() / tp;
  // The same tensor-parallel index across the stages passes the hidden states on; the stage's
  // ranks run its blocks together.
  dist::CommPtr pipe = world->split(out.tp_index, out.stage, "pp");
  dist::CommPtr group = world->split(out.stage, out.tp_index, "tp");
  StagePlan plan = plan_stages(models::load_model_source_config(model), stages);
  const auto mine = stage_parameters(*plan.shape_only, plan.bounds, out.stage);
  plan.shape_only.reset();
  std::shared_ptr<models::CausalLM> share_model;
  std::shared_ptr<train::ModelTensorParallel> share;
  if (models::is_gguf_model(model)) {
    train::TpGgufLoaded loaded = train::load_gguf_model_tp(model, group, note, mine);
    out.bytes_read = loaded.bytes_read;
    out.share = gguf_share(loaded);
    share_model = std::move(loaded.model);
    share = std::move(loaded.tp);
  } else {
    train::TpLoadedModel loaded = train::load_model_tp(model, group, note, mine);
    out.values_read = loaded.values_read;
    out.share = "read " + std::to_string(loaded.values_read) + " weight values (its stage)";
    share_model = std::move(loaded.model);
    share = std::move(loaded.tp);
  }
  out.share += held_experts(train::expert_parameter_bytes(*share_model, mine));
  out.share += converted_line(
      weights, train::convert_inference_weights_tp(*share_model, *share, weights, mine));
  out.model = std::make_shared<serve::PipelineStageModel>(
      share_model, pipe, plan.bounds, microbatches, logits_to,
      [share](const Tensor& local) { return train::model_tp_full_logits(*share, local); });
  out.model->eval();
  return out;
}

// One rank per stage: the whole model's shape with only this stage's tensors read.
std::shared_ptr<models::CausalLM> load_stage_tensors(
    const std::string& model, StagePlan& plan, const std::function<bool(const std::string&)>& mine,
    PpRankModel& out) {
  if (models::is_gguf_model(model)) {
    plan.shape_only.reset();  // the loader builds its own
    train::TpGgufLoaded loaded = train::load_gguf_model_tp(model, nullptr, {}, mine);
    out.bytes_read = loaded.bytes_read;
    out.share = gguf_share(loaded);
    return loaded.model;
  }
  // The plan's model, shape-only: this stage's tensors are allocated and filled from the files
  // below; the other stages' never are.
  std::shared_ptr<models::CausalLM> whole = plan.shape_only;
  const models::ModelConfig& config = whole->model_config();
  auto checkpoint = std::make_shared<const io::SafetensorsCheckpoint>(
      io::SafetensorsCheckpoint::open(model, io::SafetensorsLoad::Read));
  const train::RegionSource regions =
      train::safetensors_region_source(checkpoint, config.family().hf_layout(*whole, *checkpoint));
  autograd::NoGradGuard no_grad;
  for (const auto& [name, param] : whole->named_parameters()) {
    if (!mine(name)) continue;
    param.storage().materialize();
    const bool direct = param.dtype() == DType::F32;
    Tensor flat = direct ? param.detach().flatten() : empty({param.numel()}, DType::F32);
    train::fill_placed(regions, name, sharding::LocalLayout::whole(param.shape()), param.shape(), 0,
                       param.numel(), flat);
    if (!direct) param.detach().copy_from(flat.reshape(param.shape()));
    out.values_read += param.numel();
  }
  out.share = "read " + std::to_string(out.values_read) + " weight values (its stage)";
  whole->eval();
  return whole;
}

}  // namespace

PpStage pp_stage(const std::string& model, int stages, int stage) {
  StagePlan plan = plan_stages(models::load_model_source_config(model), stages);
  return {plan.bounds, stage_parameters(*plan.shape_only, plan.bounds, stage)};
}

PpRankModel load_pp_rank_model(const std::string& model, models::InferenceWeights weights,
                               const dist::CommPtr& world, int tp, int microbatches,
                               serve::PipelineStageModel::LogitsTo logits_to,
                               const std::function<void(const std::string&)>& note) {
  if (tp > 1) return load_tp_stage(model, weights, world, tp, microbatches, logits_to, note);
  TESSEL_CHECK(models::is_gguf_model(model) ||
                   std::filesystem::exists(std::filesystem::path(model) / "config.json"),
               "load model: ", (std::filesystem::path(model) / "config.json").string(),
               " not found");
  StagePlan plan = plan_stages(models::load_model_source_config(model), world->size());
  const auto mine = stage_parameters(*plan.shape_only, plan.bounds, world->rank());
  PpRankModel out;
  out.stage = world->rank();
  std::shared_ptr<models::CausalLM> whole = load_stage_tensors(model, plan, mine, out);
  out.share += held_experts(train::expert_parameter_bytes(*whole, mine));
  out.share +=
      converted_line(weights, models::convert_inference_weights(*whole, weights, {}, mine));
  out.model = std::make_shared<serve::PipelineStageModel>(whole, world, plan.bounds, microbatches,
                                                          logits_to);
  out.model->eval();
  return out;
}

}  // namespace tessel::cli
