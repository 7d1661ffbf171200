// SPDX-License-Identifier: Apache-2.0
// Converting a loaded model's matrices for inference (inference_weights.h).
#include "tessel/models/inference_weights.h"

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/quant/q4_0_groups.h"
#include "tessel/kernels/quant/row_interleave.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/quantized.h"

namespace tessel::models {

namespace {

using kernels::quant::QuantType;

QuantType quant_type_of(InferenceWeights weights) {
  switch (weights) {
    case InferenceWeights::Int8:
      return QuantType::Int8;
    case InferenceWeights::BF16:
      return QuantType::BF16;
    case InferenceWeights::F16:
      return QuantType::F16;
    case InferenceWeights::Stored:
      break;
  }
  TESSEL_FAIL("convert_inference_weights: 'stored' has no quantized type");
}

// Converts one layer's matrix unless it is GGUF blocks already; a weight shared with a layer
// converted before (one tensor bound to two modules) is converted once. `amax`: the int8 rows'
// maxima to use instead of their own (empty: their own).
template <class Layer>
void convert(Layer& layer, QuantType type, std::set<const void*>& seen, WeightConversion& out,
             const std::function<std::vector<float>()>& amax = {}) {
  if (layer.quant_type()) {
    ++out.kept;
    return;
  }
  if (!seen.insert(layer.weight.impl_ptr().get()).second) return;
  const int64_t before = int64_t(layer.weight.nbytes());
  const std::vector<float> maxima = amax ? amax() : std::vector<float>();
  const Tensor blocks = nn::quantize_matrix(layer.weight, type, maxima);
  layer.set_quantized(type, blocks);
  ++out.converted;
  out.bytes_before += before;
  out.bytes_after += int64_t(blocks.nbytes());
}

// Rebinds each quantized matrix to the layout its backend reads fastest (Backend::quant_layout;
// today Q4_0 -> Q4_0x4 on CPUs whose 512-bit decode rows read the regrouped form, and the
// k-quants and Q8_0 -> their x4 forms where the SIMD rows read them, quant/row_interleave.h):
// the same values, another order of the bytes, a copy made once (a view of a mapped file is left
// to the page cache). A weight shared by two layers is regrouped once and both layers told.
template <class Layer>
void use_backend_layout(Layer& layer, std::map<const void*, QuantType>& done,
                        WeightConversion& out) {
  const std::optional<QuantType> type = layer.quant_type();
  if (!type) return;
  const void* impl = layer.weight.impl_ptr().get();
  if (const auto it = done.find(impl); it != done.end()) {
    if (it->second != *type) layer.set_quantized_layout(it->second, layer.weight);
    return;
  }
  const QuantType want = kernels::backend_for(layer.weight.device()).quant_layout(*type);
  done.emplace(impl, want);
  if (want == *type) return;
  const bool regroup = *type == QuantType::Q4_0 && want == QuantType::Q4_0x4;
  TESSEL_CHECK(
      regroup ||
          (kernels::quant::is_interleaved(want) && kernels::quant::plain_form(want) == *type),
      "convert_inference_weights: no conversion from ", kernels::quant::quant_type_name(*type),
      " to ", kernels::quant::quant_type_name(want));
  const Tensor& blocks = layer.weight;  // contiguous, as every tensor
  Tensor grouped = empty(blocks.shape(), DType::I8, blocks.device());
  const int64_t n = blocks.size(0);
  const int64_t k =
      blocks.size(1) / kernels::quant::block_bytes(*type) * kernels::quant::block_elements(*type);
  const auto* src = static_cast<const uint8_t*>(blocks.data_ptr());
  auto* dst = static_cast<uint8_t*>(grouped.data_ptr());
  if (regroup)
    kernels::quant::regroup_q4_0(src, n, k, dst);
  else
    kernels::quant::interleave_rows(*type, src, n, k, dst);
  layer.set_quantized_layout(want, grouped);
  ++out.regrouped;
}

}  // namespace

InferenceWeights parse_inference_weights(const std::string& name) {
  if (name.empty() || name == "stored") return InferenceWeights::Stored;
  if (name == "int8") return InferenceWeights::Int8;
  if (name == "bf16") return InferenceWeights::BF16;
  if (name == "f16") return InferenceWeights::F16;
  TESSEL_FAIL("--weights '", name, "': expected int8, bf16, f16 or stored");
}

const char* inference_weights_name(InferenceWeights weights) {
  switch (weights) {
    case InferenceWeights::Stored:
      return "stored";
    case InferenceWeights::Int8:
      return "int8";
    case InferenceWeights::BF16:
      return "bf16";
    case InferenceWeights::F16:
      return "f16";
  }
  return "?";
}

WeightConversion convert_inference_weights(CausalLM& model, InferenceWeights weights,
                                           const Int8RowAmax& row_amax,
                                           const std::function<bool(const std::string&)>& keep) {
  WeightConversion out;
  std::map<const void*, QuantType> done;
  auto layouts = [&] {
    for (auto& [name, module] : model.named_modules()) {
      const bool matrix = dynamic_cast<nn::Linear*>(module) || dynamic_cast<nn::Embedding*>(module);
      if (!matrix || (keep && !keep(name + ".weight"))) continue;
      if (auto* linear = dynamic_cast<nn::Linear*>(module)) use_backend_layout(*linear, done, out);
      if (auto* embedding = dynamic_cast<nn::Embedding*>(module))
        use_backend_layout(*embedding, done, out);
    }
    return out;
  };
  if (weights == InferenceWeights::Stored) return layouts();
  TESSEL_CHECK(!model.is_training(), "--weights ", inference_weights_name(weights),
               ": the converted matrices are inference-only; call eval() first");
  const QuantType type = quant_type_of(weights);
  std::set<const void*> seen;
  for (auto& [name, module] : model.named_modules()) {
    const bool matrix = dynamic_cast<nn::Linear*>(module) || dynamic_cast<nn::Embedding*>(module);
    if (matrix && keep && !keep(name + ".weight")) continue;
    if (auto* linear = dynamic_cast<nn::Linear*>(module)) {
      std::function<std::vector<float>()> amax;
      if (row_amax && type == QuantType::Int8)
        amax = [&row_amax, linear, path = name] {
          return row_amax(path, nn::row_abs_max(linear->weight));
        };
      convert(*linear, type, seen, out, amax);
    }
    if (auto* embedding = dynamic_cast<nn::Embedding*>(module))
      convert(*embedding, type, seen, out);
  }
  return layouts();
}

}  // namespace tessel::models
