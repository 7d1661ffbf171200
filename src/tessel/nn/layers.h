// SPDX-License-Identifier: Apache-2.0
// The basic layers: Linear (weight [out, in], as in PyTorch), Embedding, LayerNorm, RMSNorm and
// Dropout. Constructors allocate and initialise their parameters (normal(0, 0.02) weights, zero
// biases, unit norm scales: GPT-2's scheme) from a Generator; `Init::None` only allocates.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "tessel/core/positional_draws.h"
#include "tessel/core/rng.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/nn/module.h"

namespace tessel::nn {

// How a layer fills its parameters at construction.
struct Init {
  enum Kind { Random, None } kind = Random;
  Generator* generator = nullptr;  // null: the process-wide generator
  double std = 0.02;               // of the normal weights
  DType dtype = DType::F32;

  static Init none(DType dtype = DType::F32) { return {None, nullptr, 0.0, dtype}; }
  static Init normal(Generator* g, double std = 0.02, DType dtype = DType::F32) {
    return {Random, g, std, dtype};
  }
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Init init = {});
  Tensor forward(const Tensor& x);
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Tensor weight, bias;  // bias undefined without bias

  // Inference with the weight kept as GGUF blocks (nn/quantized.h): forward multiplies through
  // ops::quant_linear; forward in training mode is an Error. dequantize() widens it back to f32.
  // The blocks replace the matrix the layer holds when called: its whole [out, in], or a
  // tensor-parallel rank's piece (whose forward override then multiplies through them).
  void set_quantized(kernels::quant::QuantType type, const Tensor& blocks);
  // The blocks rebound to another layout of the same values (a quantized layer only:
  // Backend::quant_layout's Q4_0 -> Q4_0x4 or Q8_0 -> Q8_0x4, models/inference_weights.h).
  void set_quantized_layout(kernels::quant::QuantType type, const Tensor& blocks);
  void dequantize();
  std::optional<kernels::quant::QuantType> quant_type() const { return quant_; }

 private:
  int64_t in_, out_;
  std::optional<kernels::quant::QuantType> quant_;
  std::array<int64_t, 2> held_{};  // the float matrix the blocks replaced (a tp piece, or whole)
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Init init = {});
  // ids i32/i64 of any shape -> [ids.shape..., dim].
  Tensor forward(const Tensor& ids);
  // x [..., dim] times the table transposed -> [..., num_embeddings]: a tied LM head, quantized
  // or not.
  Tensor project(const Tensor& x);
  int64_t num_embeddings() const { return num_; }
  int64_t dim() const { return dim_; }
  // The activation dtype the lookup gives (f32 for a quantized table).
  DType output_dtype() const { return quant_ ? DType::F32 : weight.dtype(); }
  Tensor weight;

  // As Linear's: lookups dequantize only the rows they return (ops::quant_embedding).
  void set_quantized(kernels::quant::QuantType type, const Tensor& blocks);
  void set_quantized_layout(kernels::quant::QuantType type, const Tensor& blocks);
  void dequantize();
  std::optional<kernels::quant::QuantType> quant_type() const { return quant_; }

 private:
  int64_t num_, dim_;
  std::optional<kernels::quant::QuantType> quant_;
  std::array<int64_t, 2> held_{};
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true, Init init = {});
  Tensor forward(const Tensor& x);
  double eps() const { return eps_; }
  Tensor weight, bias;

 private:
  double eps_;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, Init init = {});
  Tensor forward(const Tensor& x);
  double eps() const { return eps_; }
  Tensor weight;

 private:
  double eps_;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p, Generator* generator = nullptr);
  // Identity in eval mode or when p == 0.
  Tensor forward(const Tensor& x);
  double p() const { return p_; }
  Generator* generator() const { return generator_; }  // null: the process-wide generator
  // Draw positionally (core/positional_draws.h: the trainer's layout-invariant dropout) as part
  // `part` of `parts` of dim 0, at the site of this module's path, which pipeline stages and
  // tensor-parallel ranks keep as one process has it. Set after the model is built.
  void set_positional(int64_t part, int64_t parts);
  const PositionalDraw* positional() const { return positional_ ? &*positional_ : nullptr; }

 private:
  double p_;
  Generator* generator_;
  std::optional<PositionalDraw> positional_;
};

}  // namespace tessel::nn
