// SPDX-License-Identifier: Apache-2.0
// Element-wise reductions of whole buffers, shared by the in-process backend (which reduces every
// rank's contribution at once) and MPI's user-defined operations (which combine two buffers).
// bf16 and f16 are converted to f32, combined there, and rounded once per result.
#pragma once

#include <cstdint>
#include <span>

#include "tessel/core/dtype.h"
#include "tessel/dist/op_call.h"

namespace tessel::dist {

// out = inputs[0] ⊕ inputs[1] ⊕ ... in rank order; bf16/f16 sum in one f32 accumulator (a single
// rounding), integers wrap on overflow. Avg divides the sum by inputs.size() (floating dtypes
// only). `out` may alias one of the inputs.
void reduce_buffers(std::span<const void* const> inputs, void* out, int64_t count, DType dtype,
                    ReduceOp op);

// inout = in ⊕ inout (Sum or Max), computed in f32 for bf16/f16 (MPI's user-op signature).
void combine_into(const void* in, void* inout, int64_t count, DType dtype, ReduceOp op);

// data /= n (floating dtypes), for Avg on backends that only sum.
void divide_by(void* data, int64_t count, DType dtype, int n);

}  // namespace tessel::dist
