// SPDX-License-Identifier: Apache-2.0
// Input validation shared by the CPU and the reference backends: one function per kernel checks
// definedness, dtypes, shapes and index ranges before anything is written, and throws Error
// naming the op and the offending values. Each returns the geometry the kernel loops over.
// Index values (ids, targets, positions) are read only from host tensors: for tensors on a
// device the checks cover dtypes and shapes, and the device backend checks the values there.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

// A row-wise kernel's input viewed as rows x cols (cols = the last dim).
struct RowShape {
  int64_t rows = 0, cols = 0;
};

// Reads an i32 or i64 index tensor without a dtype switch per element at the call site.
class IndexView {
 public:
  explicit IndexView(const Tensor& ids)
      : data_(ids.data_ptr()), is_i64_(ids.dtype() == DType::I64) {}
  int64_t operator[](int64_t i) const {
    return is_i64_ ? static_cast<const int64_t*>(data_)[i]
                   : int64_t(static_cast<const int32_t*>(data_)[i]);
  }

 private:
  const void* data_;
  bool is_i64_;
};

// x defined, and its dtype one the backend supports for `op`.
void check_supported(const Backend& backend, Op op, const Tensor& x, const char* what = "x");

void validate_unary(const Backend& backend, const Tensor& x, const Tensor& y);
// y may be undefined (the kernel then recomputes f(x) where it needs it).
void validate_unary_backward(const Backend& backend, const Tensor& x, const Tensor& y,
                             const Tensor& dy, const Tensor& dx);
void validate_binary(const Backend& backend, BinaryOp op, const Tensor& a, const Tensor& b,
                     const Tensor& out);
// Returns the reduced dims, normalised (non-negative) and sorted; rejects duplicates.
std::vector<int> validate_reduce(const Backend& backend, ReduceOp op, const Tensor& x,
                                 std::span<const int> dims, const Tensor& out);

RowShape validate_softmax(const Backend& backend, const Tensor& x, const Tensor& y);
RowShape validate_softmax_backward(const Backend& backend, const Tensor& y, const Tensor& dy,
                                   const Tensor& dx);

// weight / bias may be undefined; mean / rstd may be undefined (not saved).
RowShape validate_layer_norm(const Backend& backend, const Tensor& x, const Tensor& weight,
                             const Tensor& bias, double eps, const Tensor& y, const Tensor& mean,
                             const Tensor& rstd);
RowShape validate_layer_norm_backward(const Backend& backend, const Tensor& dy, const Tensor& x,
                                      const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& dx, const Tensor& dweight, const Tensor& dbias);
RowShape validate_rms_norm(const Backend& backend, const Tensor& x, const Tensor& weight,
                           double eps, const Tensor& y, const Tensor& rstd);
RowShape validate_rms_norm_backward(const Backend& backend, const Tensor& dy, const Tensor& x,
                                    const Tensor& weight, const Tensor& rstd, const Tensor& dx,
                                    const Tensor& dweight);

// Returns {N, C}; every id is checked to lie in [0, V).
RowShape validate_embedding(const Backend& backend, const Tensor& weight, const Tensor& ids,
                            const Tensor& out);
RowShape validate_embedding_backward(const Backend& backend, const Tensor& dout, const Tensor& ids,
                                     const Tensor& dweight);

// Returns {N, V}; every target is checked to lie in [0, V) or equal ignore_index.
RowShape validate_cross_entropy(const Backend& backend, const Tensor& logits, const Tensor& targets,
                                int64_t ignore_index, const Tensor& losses, const Tensor& lse);
RowShape validate_cross_entropy_backward(const Backend& backend, const Tensor& logits,
                                         const Tensor& targets, const Tensor& lse,
                                         const Tensor& dlosses, int64_t ignore_index,
                                         const Tensor& dlogits);

void validate_adamw(const Backend& backend, const Tensor& param, const Tensor& grad,
                    const Tensor& m, const Tensor& v, const AdamWParams& params);
void validate_dropout(const Backend& backend, const Tensor& x, const Tensor& y, double p);
// As many outputs as tensors; every tensor defined, of a supported floating dtype, on the host.
void validate_square_sums(const Backend& backend, std::span<const Tensor> xs,
                          std::span<const double> out);

// x [B, T, H, D] as tokens = B * T rows of H heads of D (even) elements, over tables of P rows.
struct RopeShape {
  int64_t tokens = 0, heads = 0, dim = 0, table_rows = 0;
};
// x and out [B, T, H, D] with D even, cos and sin [P, D/2] in the stat dtype, positions i32 / i64
// [B, T], every position in [0, P) (the first outside is named with its [b, t]).
RopeShape validate_rope(const Backend& backend, const Tensor& x, const Tensor& cos,
                        const Tensor& sin, const Tensor& positions, const Tensor& out);

// y[m, n] = x[m, k] W^T with W's n rows in a GGUF weight format: x and y 2-D of the same
// supported dtype, w i8 [n, row_bytes(type, k)] (k a multiple of the type's block).
struct QuantMatmulShape {
  int64_t m = 0, n = 0, k = 0, row_bytes = 0;
};
QuantMatmulShape validate_quant_matmul(const Backend& backend, quant::QuantType type,
                                       const Tensor& x, const Tensor& w, const Tensor& y);

}  // namespace tessel::kernels
