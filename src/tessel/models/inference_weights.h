// SPDX-License-Identifier: Apache-2.0
// `--weights int8|bf16|f16` of generate, eval, serve and bench generate: the matrices of a loaded
// model converted once, in place, to a form that Backend::quant_matmul reads as it is. int8 is
// weight-only int8 with one symmetric scale per output channel (the layout of "Efficiently
// Scaling Transformer Inference"'s int8 weights: kernels/quant/quant_format.h, QuantType::Int8);
// bf16 / f16 round each weight to nearest even. Every nn::Linear and nn::Embedding weight is
// converted (the tied LM head is the embedding table, so it is converted once), and the float
// values are released as each matrix is bound, so no f32 copy stays alongside. Norms and biases
// stay as they are. Matrices already held as GGUF blocks are kept, in the layout the backend
// asks for (Q4_0 regrouped four rows at a time for the CPU's decode rows: quant/q4_0_groups.h;
// the k-quants and Q8_0 interleaved four rows at a time: quant/row_interleave.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/models/causal_lm.h"

namespace tessel::models {

enum class InferenceWeights { Stored, Int8, BF16, F16 };

// "" or "stored" -> Stored, "int8", "bf16", "f16"; an Error lists the names for anything else.
InferenceWeights parse_inference_weights(const std::string& name);
const char* inference_weights_name(InferenceWeights weights);

struct WeightConversion {
  int64_t converted = 0;     // matrices bound to the new form
  int64_t kept = 0;          // matrices that were GGUF blocks already
  int64_t bytes_before = 0;  // of the converted matrices
  int64_t bytes_after = 0;
  int64_t regrouped = 0;  // quantized matrices rebound to their backend's layout (quant_layout)
};

// int8 of a model whose Linear weights are tensor-parallel pieces: given a layer's path and the
// max|x| of each row of the piece this rank holds, the maxima to quantize those rows with. A
// row-parallel layer's rank holds a slice of every row, and a scale from its slice alone would
// not be the scale one rank gives the whole row; the caller returns the maximum over the ranks.
// Called for every Linear converted, in the model's module order, on every rank alike (so it may
// be collective).
using Int8RowAmax =
    std::function<std::vector<float>(const std::string& layer, std::vector<float> own)>;

// Converts `model`'s matrices (nothing for Stored), then rebinds every quantized matrix (GGUF
// blocks or converted) to the layout its backend reads fastest (Backend::quant_layout: the same
// values, so the same outputs; for Stored this is all it does). The model must not be training. The
// layers may hold tensor-parallel pieces (parallel/tensor: each piece is converted, and the layers'
// forward overrides multiply through the converted form); `row_amax` then gives int8's scales.
// With `keep`, only the layers whose weight it accepts (by parameter name, "<layer>.weight") are
// converted: a pipeline stage converts its own layers and leaves the others' untouched memory
// alone (cli/pp_model.h).
WeightConversion convert_inference_weights(
    CausalLM& model, InferenceWeights weights, const Int8RowAmax& row_amax = {},
    const std::function<bool(const std::string&)>& keep = {});

}  // namespace tessel::models
