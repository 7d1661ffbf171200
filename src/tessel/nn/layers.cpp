// SPDX-License-Identifier: Apache-2.0
// The basic layers, each a thin Module over one differentiable op.
#include "tessel/nn/layers.h"

#include "tessel/nn/init.h"
#include "tessel/nn/quantized.h"
#include "tessel/ops/ops.h"
#include "tessel/ops/quant_linear.h"
#include "tessel/tensor/unallocated.h"

namespace tessel::nn {

namespace {

// A new parameter, uninitialised: shape-only while a DeferInit lives (no address space until the
// rank that holds it materialises it: tensor/unallocated.h), else allocated.
Tensor parameter_tensor(const Shape& shape, DType dtype) {
  return init::deferred_record() != nullptr ? unallocated(shape, dtype) : empty(shape, dtype);
}

// Under init::DeferInit the values are only described (the generator's offsets reserved as
// randn reserves them), and the tensor has no storage bytes yet (parameter_tensor).
Tensor weight_tensor(const Shape& shape, const Init& init) {
  Tensor t = parameter_tensor(shape, init.dtype);
  if (init.kind != Init::Random) return t;
  if (init::InitRecord* record = init::deferred_record()) {
    TESSEL_CHECK(init.std >= 0, "init::normal_: std ", init.std, " must be >= 0");
    Generator& g = init.generator ? *init.generator : default_generator();
    init::InitRecipe r;
    r.kind = init::InitRecipe::Normal;
    r.seed = g.seed();
    r.offset = g.reserve(uint64_t(shape.numel()));
    r.std = init.std;
    record->add(t, r);
  } else {
    init::normal_(t, init.std, init.generator);
  }
  return t;
}

Tensor constant_tensor(const Shape& shape, const Init& init, double value) {
  Tensor t = parameter_tensor(shape, init.dtype);
  if (init.kind != Init::Random) return t;
  if (init::InitRecord* record = init::deferred_record()) {
    init::InitRecipe r;
    r.value = value;
    record->add(t, r);
  } else {
    t.fill(value);
  }
  return t;
}

// The matrix the blocks replace: the weight as the layer holds it now, which is the whole
// [rows, cols] or a tensor-parallel rank's piece of it (rows or columns of it).
std::array<int64_t, 2> held_matrix(const Tensor& weight, int64_t rows, int64_t cols) {
  if (weight.defined() && weight.ndim() == 2) return {weight.size(0), weight.size(1)};
  return {rows, cols};
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Init init)
    : Module("Linear"), in_(in_features), out_(out_features) {
  TESSEL_CHECK(in_features > 0 && out_features > 0, "Linear: sizes in=", in_features,
               " out=", out_features, " must be positive");
  weight = register_parameter("weight", weight_tensor(Shape{out_features, in_features}, init));
  if (with_bias) bias = register_parameter("bias", constant_tensor(Shape{out_features}, init, 0.0));
}

Tensor Linear::forward(const Tensor& x) {
  return run_forward({x}, [&] {
    if (!quant_) return ops::linear(x, weight, bias);
    check_quantized_inference(*this, *quant_);
    return ops::quant_linear(x, *quant_, weight, in_, bias);
  });
}

void Linear::set_quantized(kernels::quant::QuantType type, const Tensor& blocks) {
  TESSEL_CHECK(!quant_, "Linear '", path(), "' is already quantized");
  held_ = held_matrix(weight, out_, in_);
  bind_quantized_weight(weight, type, blocks, held_[0], held_[1], "Linear '" + path() + "'");
  quant_ = type;
}

void Linear::set_quantized_layout(kernels::quant::QuantType type, const Tensor& blocks) {
  TESSEL_CHECK(quant_, "Linear '", path(), "': set_quantized_layout needs a quantized layer");
  bind_quantized_weight(weight, type, blocks, held_[0], held_[1], "Linear '" + path() + "'");
  quant_ = type;
}

void Linear::dequantize() {
  if (!quant_) return;
  dequantize_weight(weight, *quant_, held_[0], held_[1]);
  quant_.reset();
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Init init)
    : Module("Embedding"), num_(num_embeddings), dim_(dim) {
  TESSEL_CHECK(num_embeddings > 0 && dim > 0, "Embedding: sizes num_embeddings=", num_embeddings,
               " dim=", dim, " must be positive");
  weight = register_parameter("weight", weight_tensor(Shape{num_embeddings, dim}, init));
}

Tensor Embedding::forward(const Tensor& ids) {
  return run_forward({ids}, [&] {
    if (!quant_) return ops::embedding(weight, ids);
    check_quantized_inference(*this, *quant_);
    return ops::quant_embedding(*quant_, weight, dim_, ids);
  });
}

Tensor Embedding::project(const Tensor& x) {
  if (!quant_) return ops::linear(x, weight);
  check_quantized_inference(*this, *quant_);
  return ops::quant_linear(x, *quant_, weight, dim_);
}

void Embedding::set_quantized(kernels::quant::QuantType type, const Tensor& blocks) {
  TESSEL_CHECK(!quant_, "Embedding '", path(), "' is already quantized");
  held_ = held_matrix(weight, num_, dim_);
  bind_quantized_weight(weight, type, blocks, held_[0], held_[1], "Embedding '" + path() + "'");
  quant_ = type;
}

void Embedding::set_quantized_layout(kernels::quant::QuantType type, const Tensor& blocks) {
  TESSEL_CHECK(quant_, "Embedding '", path(), "': set_quantized_layout needs a quantized table");
  bind_quantized_weight(weight, type, blocks, held_[0], held_[1], "Embedding '" + path() + "'");
  quant_ = type;
}

void Embedding::dequantize() {
  if (!quant_) return;
  dequantize_weight(weight, *quant_, held_[0], held_[1]);
  quant_.reset();
}

LayerNorm::LayerNorm(int64_t dim, double eps, bool with_bias, Init init)
    : Module("LayerNorm"), eps_(eps) {
  TESSEL_CHECK(dim > 0 && eps >= 0, "LayerNorm: dim=", dim, " eps=", eps,
               " (expected dim > 0, eps >= 0)");
  weight = register_parameter("weight", constant_tensor(Shape{dim}, init, 1.0));
  if (with_bias) bias = register_parameter("bias", constant_tensor(Shape{dim}, init, 0.0));
}

Tensor LayerNorm::forward(const Tensor& x) {
  return run_forward({x}, [&] { return ops::layer_norm(x, weight, bias, eps_); });
}

RMSNorm::RMSNorm(int64_t dim, double eps, Init init) : Module("RMSNorm"), eps_(eps) {
  TESSEL_CHECK(dim > 0 && eps >= 0, "RMSNorm: dim=", dim, " eps=", eps,
               " (expected dim > 0, eps >= 0)");
  weight = register_parameter("weight", constant_tensor(Shape{dim}, init, 1.0));
}

Tensor RMSNorm::forward(const Tensor& x) {
  return run_forward({x}, [&] { return ops::rms_norm(x, weight, eps_); });
}

Dropout::Dropout(double p, Generator* generator) : Module("Dropout"), p_(p), generator_(generator) {
  TESSEL_CHECK(p >= 0 && p < 1, "Dropout: probability ", p, " must be in [0, 1)");
}

Tensor Dropout::forward(const Tensor& x) {
  return run_forward({x},
                     [&] { return ops::dropout(x, p_, is_training(), generator_, positional()); });
}

void Dropout::set_positional(int64_t part, int64_t parts) {
  TESSEL_CHECK(parts >= 1 && part >= 0 && part < parts, "Dropout '", path(), "': part ", part,
               " of ", parts, " (expected 0 <= part < parts)");
  positional_ = PositionalDraw{site_id(path()), part, parts};
}

}  // namespace tessel::nn
