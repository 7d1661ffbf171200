// SPDX-License-Identifier: Apache-2.0
// Tensors over device memory owned elsewhere; needs no CUDA headers (Storage only keeps a pointer).
#include "tessel/dist/nccl/nccl.h"

namespace tessel::dist {

Tensor cuda_tensor_view(void* device_ptr, const Shape& shape, DType dtype, int device) {
  TESSEL_CHECK(device >= 0, "cuda_tensor_view: device index ", device, " must be >= 0");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(device_ptr, size_t(shape.numel()) * dtype_size(dtype),
                                            Device::cuda(device), nullptr);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace tessel::dist
