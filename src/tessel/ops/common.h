// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the op families: input checks whose errors name the op and the values,
// the kernel backend to call, and the broadcasting helpers of the backward passes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessel/autograd/backend_scope.h"
#include "tessel/autograd/meta.h"
#include "tessel/kernels/backend.h"

namespace tessel::ops::detail {

inline kernels::Backend& backend(const Tensor& t) {
  return autograd::backend_for(t.device());
}

// "x [7, 13] f32" for messages.
std::string describe(const Tensor& t);

// t is defined and its dtype is one the backend runs `kernel` in.
void check_float(const Tensor& t, std::string_view op, std::string_view what, kernels::Op kernel);
// a and b have the same dtype and device.
void check_same_kind(const Tensor& a, std::string_view a_name, const Tensor& b,
                     std::string_view b_name, std::string_view op);
// Offsets of a grouped product: i64 [groups + 1], from 0 to `rows`, never decreasing (group g
// holds rows [offsets[g], offsets[g + 1])); `weight` is named in the message.
void check_group_offsets(const Tensor& offsets, int64_t groups, int64_t rows, const Tensor& weight,
                         std::string_view op);
// The NumPy broadcast of two shapes, or an Error naming the op.
Shape broadcast_shape(const Shape& a, const Shape& b, std::string_view op);
// Normalised, sorted, distinct dims; empty `dims` means all dims.
std::vector<int> reduce_dims(const Shape& shape, const std::vector<int>& dims, std::string_view op);
// shape with `dims` set to 1.
Shape keepdim_shape(const Shape& shape, const std::vector<int>& dims);

// Non-recording kernel calls used by backward passes (and by the forwards).
Tensor unary_raw(kernels::UnaryOp op, const Tensor& x, double alpha = 0.0);
Tensor binary_raw(kernels::BinaryOp op, const Tensor& a, const Tensor& b);
// Sums g over the dims that broadcasting expanded, back to `shape`.
Tensor sum_to(const Tensor& g, const Shape& shape);
// Broadcasts g (whose dims are either equal to shape's or 1) to `shape`, as a copy.
Tensor expand_to(const Tensor& g, const Shape& shape);

}  // namespace tessel::ops::detail
