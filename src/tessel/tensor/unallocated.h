// SPDX-License-Identifier: Apache-2.0
// Shape-only host tensors: a tensor whose storage has a size and no bytes, not even address
// space, until storage().materialize() allocates them (data() refuses it before). Construction
// without materialisation builds a model's parameters this way, so that a rank allocates only
// what it holds once the layout's axes have cut the model (train/materialize.h); PyTorch's meta
// device with `to_empty` plays this part there.
#pragma once

#include "tessel/tensor/tensor.h"

namespace tessel {

// Host tensor of `shape` and `dtype`, released from the start (materialised later from the host
// allocator). Under a meta DefaultDeviceScope (a shape-only trace) a meta tensor, as empty().
Tensor unallocated(const Shape& shape, DType dtype = DType::F32);

}  // namespace tessel
