// SPDX-License-Identifier: Apache-2.0
// Rebinding layer weights to GGUF blocks and back (quantized.h), as Module::to rebinds dtypes:
// the parameter's shared impl changes, so every handle to it follows.
#include "tessel/nn/quantized.h"

#include "tessel/core/error.h"
#include "tessel/kernels/quant/dequantize.h"
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

void dequantize_weight(Tensor& weight, kernels::quant::QuantType type, int64_t rows, int64_t cols) {
  const auto* p = static_cast<const uint8_t*>(weight.data_ptr());
  const Tensor values = kernels::quant::dequantize(type, {p, weight.nbytes()}, Shape({rows, cols}));
  rebind(weight, values, true);
}

void check_quantized_inference(const Module& layer, kernels::quant::QuantType type) {
  TESSEL_CHECK(!layer.is_training(), layer.type_name(), " '", layer.path(),
               "': the weight is held as GGUF ", kernels::quant::quant_type_name(type),
               " blocks, which are inference-only: train the safetensors model (or a GGUF loaded "
               "with its weights dequantized) and quantize it afterwards");
}

}  // namespace tessel::nn
