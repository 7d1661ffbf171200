// SPDX-License-Identifier: Apache-2.0
// Loading a model directory into this rank's tensor-parallel share (model_tp_load.h).
#include "tessel/train/model_tp_load.h"

#include <filesystem>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/nn/init.h"
#include "tessel/nn/layers.h"
#include "tessel/parallel/tensor/tensor_parallel.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"
#include "tessel/train/checkpoint/safetensors_regions.h"
#include "tessel/train/model_expert_pieces.h"

namespace tessel::train {

TpLoadedModel load_model_tp(const std::string& dir, const dist::CommPtr& tp,
                            const std::function<void(const std::string&)>& note,
                            const std::function<bool(const std::string&)>& keep) {
  const std::filesystem::path config_path = std::filesystem::path(dir) / "config.json";
  TESSEL_CHECK(std::filesystem::exists(config_path), "load model: ", config_path.string(),
               " not found");
  const models::ConfigPtr config = models::load_model_config(config_path.string());
  if (tp) (void)models::inference_tensor_parallel(*config, tp->size());
  TpLoadedModel out;
  {
    // Built shape-only (tensor/unallocated.h: no bytes, no address space) and cut without copying
    // values, so the cut's pieces are shape-only too: only the pieces this rank holds are ever
    // allocated, below, and each is filled from the file's byte ranges. The whole model is never
    // allocated on any rank, not even untouched (its address space would count in VmPeak).
    nn::init::InitRecord unused;
    nn::init::DeferInit defer(unused);
    out.model = config->build_empty();
  }
  auto checkpoint = std::make_shared<const io::SafetensorsCheckpoint>(
      io::SafetensorsCheckpoint::open(dir, io::SafetensorsLoad::Read));
  // The layout describes the whole model's tensors, so it is taken before the cut.
  const RegionSource regions =
      safetensors_region_source(checkpoint, config->family().hf_layout(*out.model, *checkpoint));
  int64_t values = 0;
  const RegionSource counted = [&](const std::string& name, const PieceRegion& region, float* dst) {
    values += region.numel();
    regions(name, region, dst);
  };
  out.tp = std::make_shared<ModelTensorParallel>(parallelize_model(*out.model, tp, "", false, note,
                                                                   /*copy_values=*/false));
  // The dense plan leaves MoE layers whole; their experts' FFN columns are split here.
  const ExpertPieces experts = split_experts_over_tp(*out.model, tp);
  autograd::NoGradGuard no_grad;
  for (const auto& [name, param] : out.model->named_parameters()) {
    if (keep && !keep(name)) continue;
    param.storage().materialize();
    const sharding::LocalLayout placement = experts.placement(out.tp.get(), name, param.shape());
    // Straight into the parameter when it is f32 (parameters are contiguous), else through one
    // temporary of its size.
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

models::WeightConversion convert_inference_weights_tp(
    models::CausalLM& model, const ModelTensorParallel& tp, models::InferenceWeights weights,
    const std::function<bool(const std::string&)>& keep) {
  // Which layers are row-parallel is read from the plan's result (dim 1 of the weight split),
  // the same on every rank, so every rank makes the same all-reduces in the same order.
  const models::Int8RowAmax whole_rows = [&](const std::string& layer, std::vector<float> own) {
    const sharding::ShardLayout* spec = tp.result.spec(layer + ".weight");
    if (spec == nullptr || spec->dim != 1) return own;  // whole rows: their own maxima
    Tensor t = from_data(own, Shape({int64_t(own.size())}));
    tp.tp->all_reduce(t, dist::ReduceOp::Max);
    const float* p = t.data<float>();
    return std::vector<float>(p, p + own.size());
  };
  // int8: a row-parallel piece whose columns cut the product's 32-column activation blocks is
  // padded first, so that the product rounds in one process's blocks (parallel/tensor/
  // int8_row_blocks.h). Pure geometry, the same decision on every rank; nothing is exchanged.
  if (weights == models::InferenceWeights::Int8)
    for (auto& [name, module] : model.named_modules()) {
      auto* linear = dynamic_cast<nn::Linear*>(module);
      if (linear == nullptr || linear->quant_type() || (keep && !keep(name + ".weight"))) continue;
      const sharding::ShardLayout* spec = tp.result.spec(name + ".weight");
      if (spec != nullptr && spec->dim == 1) parallel::pad_rowwise_int8(*linear, *tp.tp);
    }
  return models::convert_inference_weights(model, weights, whole_rows, keep);
}

}  // namespace tessel::train
