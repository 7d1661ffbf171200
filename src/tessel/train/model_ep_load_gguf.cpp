// SPDX-License-Identifier: Apache-2.0
// Loading a GGUF mixture-of-experts model into this rank's expert-parallel share
// (model_ep_load.h): the dense part through the GGUF per-rank loader (model_tp_load_gguf.h, with
// no tensor-parallel group and the expert stacks left shape-only), then the experts' cut, then
// each stack's byte range for this rank's experts.
#include <set>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/models/family.h"
#include "tessel/models/gguf_expert_stack.h"
#include "tessel/models/gguf_model.h"
#include "tessel/nn/init.h"
#include "tessel/nn/moe_experts.h"
#include "tessel/parallel/expert/expert_inference.h"
#include "tessel/train/model_ep_load.h"
#include "tessel/train/model_tp_load_gguf.h"

namespace tessel::train {

namespace {

namespace quant = kernels::quant;

// From a shape-only build of the model: the full names of the expert stacks' parameters, and the
// layout of the whole model in the file (taken before any matrix is bound to blocks or cut).
struct Plan {
  std::set<std::string> stacks;
  models::GgufLayout layout;
};

Plan plan(const models::ModelConfig& config, const io::GgufFile& file) {
  nn::init::InitRecord unused;
  nn::init::DeferInit defer(unused);
  const auto model = config.build_empty();
  Plan out;
  for (auto& [name, module] : model->named_modules())
    if (auto* experts = dynamic_cast<nn::ExpertMLPs*>(module))
      for (auto& [param, t] : experts->named_parameters()) out.stacks.insert(name + "." + param);
  try {
    out.layout = config.family().gguf_layout(*model, file);
  } catch (const Error& e) {
    throw Error(std::string("expert parallelism: ") + e.what(), e.where());
  }
  return out;
}

}  // namespace

std::string expert_parallel_gguf_error(const std::string& path, int ep) {
  if (ep < 1) return "expert parallel: --ep must be >= 1, got " + std::to_string(ep);
  const models::ConfigPtr config =
      models::gguf_model_config(io::GgufFile::open(path, io::GgufMapping::Windows));
  nn::init::InitRecord unused;
  nn::init::DeferInit defer(unused);
  return parallel::expert_inference_error(*config->build_empty(), ep);
}

EpLoadedModel load_gguf_model_ep(const std::string& path, const dist::CommPtr& ep) {
  auto file =
      std::make_shared<const io::GgufFile>(io::GgufFile::open(path, io::GgufMapping::Windows));
  const models::ConfigPtr config = models::gguf_model_config(*file);
  const Plan whole = plan(*config, *file);
  const std::set<std::string>& stacks = whole.stacks;
  // The dense part, read whole; the stacks stay shape-only (no bytes, no address space).
  TpGgufLoaded dense = load_gguf_model_tp(
      path, nullptr, {}, [&](const std::string& name) { return !stacks.count(name); },
      "expert parallelism");
  EpLoadedModel out;
  out.model = dense.model;
  out.file_bytes = dense.file_bytes;
  int64_t bytes = dense.bytes_read;
  const models::GgufLayout& layout = whole.layout;
  const parallel::ExpertParallelResult split =
      parallel::parallelize_experts_inference(*out.model, ep);
  out.layers = split.layers;
  autograd::NoGradGuard no_grad;
  for (auto& [module_name, module] : out.model->named_modules()) {
    auto* experts = dynamic_cast<nn::ExpertMLPs*>(module);
    if (!experts) continue;
    const int64_t first = experts->first_expert(), count = experts->experts();
    for (auto& [leaf, param] : experts->named_parameters()) {
      const models::GgufStored& stored = layout.tensors.at(module_name + "." + leaf);
      const io::GgufTensorInfo info = models::gguf_stored_info(*file, stored);
      const Shape whole = info.shape();
      TESSEL_CHECK(stored.rope_heads == 0 && whole.ndim() >= 2 && whole[0] == count * ep->size(),
                   "expert parallelism: GGUF tensor ", stored.name, " ", whole,
                   " is not a stack of ", count * ep->size(), " experts");
      if (quant::is_ggml_type_supported(info.type) && whole.ndim() == 3 &&
          models::is_expert_stack(leaf)) {
        // This rank's experts are one byte range of the stack: a view of the mapping.
        const Tensor blocks =
            models::gguf_blocks_view(*file, file, stored, whole[0], first, count);
        experts->set_quantized(leaf, quant::quant_type_from_ggml(info.type), blocks);
        bytes += int64_t(blocks.nbytes());
        continue;
      }
      const std::optional<DType> dtype = io::dtype_of_ggml(info.type);
      TESSEL_CHECK(dtype && dtype_is_float(*dtype), "expert parallelism: GGUF tensor ", stored.name,
                   " is ", io::ggml_type_name(info.type),
                   ", which only a matrix or an expert stack may be");
      const int64_t per_expert = whole.numel() / whole[0];
      const size_t size = dtype_size(*dtype);
      param.storage().materialize();
      Tensor f32 = param.dtype() == DType::F32 ? param.detach() : empty(param.shape(), DType::F32);
      // This rank's experts' bytes alone, mapped while they are converted.
      const io::GgufBytes range =
          models::gguf_stored_bytes(*file, stored, uint64_t(first * per_expert) * size,
                                    uint64_t(count * per_expert) * size);
      convert_elements(range.bytes.data(), *dtype, f32.data<float>(), DType::F32,
                       size_t(count * per_expert));
      if (param.dtype() != DType::F32) param.detach().copy_from(f32);
      bytes += count * per_expert * int64_t(size);
    }
  }
  out.bytes_read = bytes;
  out.model->eval();
  return out;
}

}  // namespace tessel::train
