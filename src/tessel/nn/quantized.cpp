// SPDX-License-Identifier: Apache-2.0
// Rebinding layer weights to GGUF blocks and back (quantized.h), as Module::to rebinds dtypes:
// the parameter's shared impl changes, so every handle to it follows.
#include "tessel/nn/quantized.h"

#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quantize.h"
#include "tessel/nn/module.h"

namespace tessel::nn {

namespace {

void rebind(Tensor& weight, const Tensor& value, bool trainable) {
  TensorImpl& impl = *weight.impl_ptr();
  impl.storage = value.storage_ptr();
  impl.offset = value.offset();
  impl.shape = value.shape();
  impl.dtype = value.dtype();
  impl.requires_grad = trainable;
  impl.grad.reset();
}

}  // namespace

void bind_quantized_weight(Tensor& weight, kernels::quant::QuantType type, const Tensor& blocks,
                           int64_t rows, int64_t cols, const std::string& what) {
  const int64_t row_bytes = kernels::quant::row_bytes(type, cols);
  TESSEL_CHECK(blocks.dtype() == DType::I8 && blocks.shape() == Shape({rows, row_bytes}), what,
               ": ", kernels::quant::quant_type_name(type), " blocks of a [", rows, ", ", cols,
               "] weight must be i8 [", rows, ", ", row_bytes, "], got ",
               dtype_name(blocks.dtype()), " ", blocks.shape());
  rebind(weight, blocks, false);
}

void bind_quantized_stack(Tensor& weight, kernels::quant::QuantType type, const Tensor& blocks,
                          int64_t experts, int64_t rows, int64_t cols, const std::string& what) {
  const int64_t row_bytes = kernels::quant::row_bytes(type, cols);
  TESSEL_CHECK(blocks.dtype() == DType::I8 && blocks.shape() == Shape({experts, rows, row_bytes}),
               what, ": ", kernels::quant::quant_type_name(type), " blocks of a [", experts, ", ",
               rows, ", ", cols, "] stack must be i8 [", experts, ", ", rows, ", ", row_bytes,
               "], got ", dtype_name(blocks.dtype()), " ", blocks.shape());
  rebind(weight, blocks, false);
}

namespace {

void check_float_matrix(const Tensor& weight, const char* what, kernels::quant::QuantType type) {
  const DType dtype = weight.dtype();
  TESSEL_CHECK(
      weight.ndim() == 2 && (dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16),
      what, ": ", kernels::quant::quant_type_name(type), " needs an f32, f16 or bf16 matrix, got ",
      dtype_name(weight.dtype()), " ", weight.shape());
}

// Calls fn(r, row) for every row of a float matrix (tensors are contiguous), widened to f32 one
// row at a time over the thread pool, so no f32 copy of a 16-bit matrix is made.
template <class Fn>
void for_each_f32_row(const Tensor& w, Fn fn) {
  const DType dtype = w.dtype();
  const int64_t rows = w.size(0), cols = w.size(1);
  parallel_for(0, rows, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols, 1)),
               [&](int64_t lo, int64_t hi) {
                 std::vector<float> row(static_cast<size_t>(cols));
                 for (int64_t r = lo; r < hi; ++r) {
                   const float* src = row.data();
                   if (dtype == DType::F32) {
                     src = w.data<float>() + r * cols;
                   } else if (dtype == DType::F16) {
                     const F16* h = w.data<F16>() + r * cols;
                     for (int64_t c = 0; c < cols; ++c) row[size_t(c)] = f16_to_float(h[c]);
                   } else {
                     const BF16* h = w.data<BF16>() + r * cols;
                     for (int64_t c = 0; c < cols; ++c) row[size_t(c)] = bf16_to_float(h[c]);
                   }
                   fn(r, src);
                 }
               });
}

}  // namespace

Tensor quantize_matrix(const Tensor& weight, kernels::quant::QuantType type,
                       std::span<const float> int8_row_amax) {
  check_float_matrix(weight, "quantize_matrix", type);
  const int64_t rows = weight.size(0), cols = weight.size(1);
  const bool given = !int8_row_amax.empty();
  TESSEL_CHECK(
      !given || (type == kernels::quant::QuantType::Int8 && int64_t(int8_row_amax.size()) == rows),
      "quantize_matrix: row maxima (", int8_row_amax.size(), ") are for int8 and one per row (",
      rows, " rows, type ", kernels::quant::quant_type_name(type), ")");
  const int64_t row_bytes = kernels::quant::row_bytes(type, cols);
  Tensor blocks = empty({rows, row_bytes}, DType::I8);
  auto* out = static_cast<uint8_t*>(blocks.data_ptr());
  for_each_f32_row(weight, [&](int64_t r, const float* src) {
    if (given)
      kernels::quant::quantize_int8_slice(src, out + r * row_bytes, cols, int8_row_amax[size_t(r)]);
    else
      kernels::quant::quantize_row(type, src, out + r * row_bytes, cols);
  });
  return blocks;
}

std::vector<float> row_abs_max(const Tensor& weight) {
  check_float_matrix(weight, "row_abs_max", kernels::quant::QuantType::Int8);
  std::vector<float> out(size_t(weight.size(0)));
  for_each_f32_row(weight, [&](int64_t r, const float* src) {
    out[size_t(r)] = kernels::quant::int8_row_amax(src, weight.size(1));
  });
  return out;
}

void dequantize_weight(Tensor& weight, kernels::quant::QuantType type, int64_t rows, int64_t cols) {
  const auto* p = static_cast<const uint8_t*>(weight.data_ptr());
  const Tensor values = kernels::quant::dequantize(type, {p, weight.nbytes()}, Shape({rows, cols}));
  rebind(weight, values, true);
}

void dequantize_stack(Tensor& weight, kernels::quant::QuantType type, int64_t experts, int64_t rows,
                      int64_t cols) {
  const auto* p = static_cast<const uint8_t*>(weight.data_ptr());
  const Tensor values =
      kernels::quant::dequantize(type, {p, weight.nbytes()}, Shape({experts, rows, cols}));
  rebind(weight, values, true);
}

void check_quantized_inference(const Module& layer, kernels::quant::QuantType type) {
  TESSEL_CHECK(!layer.is_training(), layer.type_name(), " '", layer.path(),
               "': the weight is held as GGUF ", kernels::quant::quant_type_name(type),
               " blocks, which are inference-only: train the safetensors model (or a GGUF loaded "
               "with its weights dequantized) and quantize it afterwards");
}

}  // namespace tessel::nn
