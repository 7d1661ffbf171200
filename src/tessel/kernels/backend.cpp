// SPDX-License-Identifier: Apache-2.0
#include "tessel/kernels/backend.h"

#include <cmath>

#include "tessel/kernels/cuda/cuda_backend_instance.h"
#include "tessel/kernels/meta/meta_backend.h"

namespace tessel::kernels {

void Backend::convert(const Tensor& src, Tensor& dst) {
  TESSEL_CHECK(src.defined() && dst.defined() && src.numel() == dst.numel(),
               "convert: source and destination must be defined and equally sized, got ",
               src.defined() ? src.numel() : -1, " and ", dst.defined() ? dst.numel() : -1,
               " elements");
  convert_elements(src.data_ptr(), src.dtype(), dst.data_ptr(), dst.dtype(), size_t(src.numel()));
}

void check_adamw_hyperparameters(std::string_view who, double beta1, double beta2, double eps,
                                 double weight_decay) {
  TESSEL_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, who,
               ": betas must lie in [0, 1), got (", beta1, ", ", beta2, ")");
  TESSEL_CHECK(std::isfinite(eps) && eps >= 0, who, ": eps must be finite and >= 0, got ", eps);
  TESSEL_CHECK(std::isfinite(weight_decay) && weight_decay >= 0, who,
               ": weight_decay must be finite and >= 0, got ", weight_decay);
}

std::string_view op_name(Op op) {
  static constexpr std::string_view kNames[] = {"gemm",
                                                "unary",
                                                "unary_backward",
                                                "binary",
                                                "reduce",
                                                "softmax",
                                                "softmax_backward",
                                                "layer_norm",
                                                "layer_norm_backward",
                                                "rms_norm",
                                                "rms_norm_backward",
                                                "embedding",
                                                "embedding_backward",
                                                "attention",
                                                "attention_backward",
                                                "cross_entropy",
                                                "cross_entropy_backward",
                                                "adamw",
                                                "dropout",
                                                "rope",
                                                "square_sum",
                                                "quant_matmul",
                                                "paged_kv_store",
                                                "paged_attention",
                                                "grouped_gemm"};
  return kNames[int(op)];
}

std::string_view unary_name(UnaryOp op) {
  static constexpr std::string_view kNames[] = {"neg",  "exp",    "log",   "sqrt",       "rsqrt",
                                                "abs",  "square", "tanh",  "sigmoid",    "relu",
                                                "gelu", "silu",   "scale", "add_scalar", "pow"};
  return kNames[int(op)];
}

bool unary_derivative_reads_y(UnaryOp op) {
  return op == UnaryOp::Exp || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt || op == UnaryOp::Tanh ||
         op == UnaryOp::Sigmoid;
}

std::string_view binary_name(BinaryOp op) {
  static constexpr std::string_view kNames[] = {"add", "sub", "mul", "div", "max", "min"};
  return kNames[int(op)];
}

std::string_view reduce_name(ReduceOp op) {
  static constexpr std::string_view kNames[] = {"sum", "mean", "max", "min"};
  return kNames[int(op)];
}

GemmDesc dense_gemm_desc(int64_t batch, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
                         bool b_batched) {
  GemmDesc d;
  d.batch = batch;
  d.m = m;
  d.n = n;
  d.k = k;
  d.trans_a = trans_a;
  d.trans_b = trans_b;
  d.lda = trans_a ? m : k;
  d.ldb = trans_b ? k : n;
  d.ldc = n;
  d.stride_a = m * k;
  d.stride_b = b_batched ? k * n : 0;
  d.stride_c = m * n;
  return d;
}

Backend& backend_for(Device device) {
  if (device.is_meta()) return meta_backend();
  if (device.type == DeviceType::CUDA) return cuda_backend(device.index);
  TESSEL_CHECK(device.is_cpu(), "no kernel backend for device ", device.str(), " in this build");
  return cpu_backend();
}

}  // namespace tessel::kernels
