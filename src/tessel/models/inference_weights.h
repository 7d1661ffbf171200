// SPDX-License-Identifier: Apache-2.0
// `--weights int8|bf16|f16` of generate, eval, serve and bench generate: the matrices of a loaded
// model converted once, in place, to a form that Backend::quant_matmul reads as it is. int8 is
// weight-only int8 with one symmetric scale per output channel (the layout of "Efficiently
// Scaling Transformer Inference"'s int8 weights: kernels/quant/quant_format.h, QuantType::Int8);
// bf16 / f16 round each weight to nearest even. Every nn::Linear and nn::Embedding weight is
// converted (the tied LM head is the embedding table, so it is converted once), and the float
// values are released as each matrix is bound, so no f32 copy stays alongside. Norms and biases
// stay as they are. Matrices already held as GGUF blocks are kept.
#pragma once

#include <cstdint>
#include <string>

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
};

// Converts `model`'s matrices (nothing for Stored). The model must not be training.
WeightConversion convert_inference_weights(CausalLM& model, InferenceWeights weights);

}  // namespace tessel::models
