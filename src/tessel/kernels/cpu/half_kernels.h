// SPDX-License-Identifier: Apache-2.0
// bf16 / f16 versions of the CPU kernels: each loads its 16-bit operands as f32, runs the f32
// kernel (so every sum and every statistic accumulates in f32) and rounds its outputs back to
// nearest even on store. This CPU has no bf16 or f16 arithmetic units the libraries can use
// (AVX2 + F16C only; oneDNN 2.6 needs AVX-512 for bf16 matmul), so the 16-bit formats are storage
// formats here: they halve the bytes kept and moved between kernels, not the arithmetic.
// docs/KERNELS.md has the measurements and what a machine with AVX-512 BF16 / AMX would use.
#pragma once

#include <span>

#include "tessel/kernels/backend.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

// Each calls the same kernel of `f32` on f32 stand-ins of its 16-bit tensors. Callers have
// validated the arguments already (the f32 call validates the stand-ins again).
void half_gemm(Backend& f32, const GemmDesc& desc, const Tensor& a, const Tensor& b, Tensor& c);
void half_unary(Backend& f32, UnaryOp op, const Tensor& x, Tensor& y, double alpha);
void half_unary_backward(Backend& f32, UnaryOp op, const Tensor& x, const Tensor& y,
                         const Tensor& dy, Tensor& dx, double alpha);
void half_binary(Backend& f32, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void half_reduce(Backend& f32, ReduceOp op, const Tensor& x, std::span<const int> dims,
                 Tensor& out);
void half_softmax(Backend& f32, const Tensor& x, Tensor& y, bool log);
void half_softmax_backward(Backend& f32, const Tensor& y, const Tensor& dy, Tensor& dx, bool log);
void half_layer_norm(Backend& f32, const Tensor& x, const Tensor& weight, const Tensor& bias,
                     double eps, Tensor& y, Tensor& mean, Tensor& rstd);
void half_layer_norm_backward(Backend& f32, const Tensor& dy, const Tensor& x, const Tensor& weight,
                              const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight,
                              Tensor& dbias);
void half_rms_norm(Backend& f32, const Tensor& x, const Tensor& weight, double eps, Tensor& y,
                   Tensor& rstd);
void half_rms_norm_backward(Backend& f32, const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, Tensor& dx, Tensor& dweight);
void half_embedding_backward(Backend& f32, const Tensor& dout, const Tensor& ids, Tensor& dweight);
void half_attention(Backend& f32, const AttentionDesc& desc, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& mask, Tensor& out, Tensor& lse);
void half_attention_backward(Backend& f32, const AttentionDesc& desc, const Tensor& q,
                             const Tensor& k, const Tensor& v, const Tensor& mask,
                             const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq,
                             Tensor& dk, Tensor& dv);
void half_cross_entropy(Backend& f32, const Tensor& logits, const Tensor& targets,
                        int64_t ignore_index, Tensor& losses, Tensor& lse);
void half_cross_entropy_backward(Backend& f32, const Tensor& logits, const Tensor& targets,
                                 const Tensor& lse, const Tensor& dlosses, int64_t ignore_index,
                                 Tensor& dlogits);
void half_dropout(Backend& f32, const Tensor& x, Tensor& y, double p, uint64_t seed,
                  uint64_t offset);

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
