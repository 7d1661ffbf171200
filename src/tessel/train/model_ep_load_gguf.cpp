// SPDX-License-Identifier: Apache-2.0
// Loading a GGUF mixture-of-experts model into this rank's expert-parallel share
// (model_ep_load.h): the dense part through the GGUF per-rank loader (model_tp_load_gguf.h, with
// no tensor-parallel group, or under --tp its group, and the expert stacks left shape-only), then
// the experts' cut, then each stack's byte range for this rank's experts (under tp: their FFN
// columns).
#include <set>
#include <vector>

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
#include "tessel/train/model_expert_pieces.h"
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

namespace {

// Experts [e0, e0 + count) of a float stack ([E, A, B...] in the file, `size` bytes per element)
// into f32 `dst`, FFN columns [f0, f0 + f) of dim `dim` (1: rows of A; 2: columns of B; -1:
// whole), read with pread run by run.
int64_t read_float_piece(const io::GgufFile& file, const models::GgufStored& stored, DType dtype,
                         const Shape& whole, int64_t e0, int64_t count, int dim, int64_t f0,
                         int64_t f, float* dst) {
  const int64_t a = whole.ndim() > 1 ? whole[1] : 1, b = whole.numel() / (whole[0] * a);
  const size_t size = dtype_size(dtype);
  std::vector<uint8_t> run;
  int64_t at = 0, bytes = 0;
  auto copy = [&](int64_t element, int64_t n) {
    run.resize(size_t(n) * size);
    models::gguf_stored_read(file, stored, uint64_t(element) * size, run.data(), run.size());
    convert_elements(run.data(), dtype, dst + at, DType::F32, size_t(n));
    at += n;
    bytes += int64_t(run.size());
  };
  for (int64_t e = e0; e < e0 + count; ++e) {
    if (dim < 0) {
      copy(e * a * b, a * b);
    } else if (dim == 1) {
      copy((e * a + f0) * b, f * b);
    } else {
      for (int64_t r = 0; r < a; ++r) copy((e * a + r) * b + f0, f);
    }
  }
  return bytes;
}

}  // namespace

EpLoadedModel load_gguf_model_ep(const std::string& path, const dist::CommPtr& ep,
                                 const dist::CommPtr& tp,
                                 const std::function<void(const std::string&)>& note,
                                 const std::function<bool(const std::string&)>& keep,
                                 const std::string& parallelism) {
  const std::string what = !parallelism.empty() ? parallelism
                           : tp                 ? "expert and tensor parallelism"
                                                : "expert parallelism";
  auto file =
      std::make_shared<const io::GgufFile>(io::GgufFile::open(path, io::GgufMapping::Windows));
  const models::ConfigPtr config = models::gguf_model_config(*file);
  const Plan whole = plan(*config, *file);
  const std::set<std::string>& stacks = whole.stacks;
  // The dense part (under tp: its pieces, and the stacks cut by FFN columns); the stacks stay
  // shape-only (no bytes, no address space).
  TpGgufLoaded dense = load_gguf_model_tp(
      path, tp, note,
      [&](const std::string& name) { return !stacks.count(name) && (!keep || keep(name)); }, what);
  EpLoadedModel out;
  out.model = dense.model;
  out.tp = dense.tp;
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
    const int64_t f0 = experts->first_ffn_column(), f = experts->ffn_hidden();
    for (auto& [leaf, param] : experts->named_parameters()) {
      if (keep && !keep(module_name + "." + leaf)) continue;  // another pipeline stage's
      const models::GgufStored& stored = layout.tensors.at(module_name + "." + leaf);
      const io::GgufTensorInfo info = models::gguf_stored_info(*file, stored);
      const Shape whole = info.shape();
      TESSEL_CHECK(stored.rope_heads == 0 && whole.ndim() >= 2 && whole[0] == count * ep->size(),
                   "expert parallelism: GGUF tensor ", stored.name, " ", whole,
                   " is not a stack of ", count * ep->size(), " experts");
      // The dim tp splits by FFN columns (the dense load's expert pieces); -1: whole.
      const auto piece = dense.pieces.ffn.find(module_name + "." + leaf);
      const int dim = piece != dense.pieces.ffn.end() ? piece->second.dim : -1;
      if (quant::is_ggml_type_supported(info.type) && whole.ndim() == 3 &&
          models::is_expert_stack(leaf)) {
        const quant::QuantType type = quant::quant_type_from_ggml(info.type);
        // This rank's experts are one byte range of the stack: a view of the mapping; under tp
        // their FFN columns are a copy of those blocks.
        const Tensor blocks =
            dim < 0 ? models::gguf_blocks_view(*file, file, stored, whole[0], first, count)
                    : gguf_expert_stack_piece(*file, stored, type, whole, first, count, dim, f0, f);
        experts->set_quantized(leaf, type, blocks);
        bytes += int64_t(blocks.nbytes());
        continue;
      }
      const std::optional<DType> dtype = io::dtype_of_ggml(info.type);
      TESSEL_CHECK(dtype && dtype_is_float(*dtype), "expert parallelism: GGUF tensor ", stored.name,
                   " is ", io::ggml_type_name(info.type),
                   ", which only a matrix or an expert stack may be");
      param.storage().materialize();
      Tensor f32 = param.dtype() == DType::F32 ? param.detach() : empty(param.shape(), DType::F32);
      if (dim < 0) {
        const int64_t per_expert = whole.numel() / whole[0];
        const size_t size = dtype_size(*dtype);
        // This rank's experts' bytes alone, mapped while they are converted.
        const io::GgufBytes range =
            models::gguf_stored_bytes(*file, stored, uint64_t(first * per_expert) * size,
                                      uint64_t(count * per_expert) * size);
        convert_elements(range.bytes.data(), *dtype, f32.data<float>(), DType::F32,
                         size_t(count * per_expert));
        bytes += count * per_expert * int64_t(size);
      } else {
        bytes += read_float_piece(*file, stored, *dtype, whole, first, count, dim, f0, f,
                                  f32.data<float>());
      }
      if (param.dtype() != DType::F32) param.detach().copy_from(f32);
    }
  }
  out.bytes_read = bytes;
  out.expert_bytes = expert_parameter_bytes(*out.model, keep);
  out.model->eval();
  return out;
}

}  // namespace tessel::train
