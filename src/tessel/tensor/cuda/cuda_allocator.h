// SPDX-License-Identifier: Apache-2.0
// Device memory of CUDA tensors: cudaMalloc as a MemorySource, and one CachingAllocator per device
// over it (its pools keyed by tessel's stream of that device). Compiled only with TESSEL_CUDA.
#pragma once

#include <memory>

#include "tessel/tensor/caching_allocator.h"

namespace tessel::cuda {

// cudaMalloc / cudaFree on `device`; acquire returns nullptr when the device is out of memory, and
// describe() reports the device's free and total memory (cudaMemGetInfo).
std::unique_ptr<MemorySource> make_device_source(int device);

// The caching allocator every CUDA tensor of `device` comes from (created on first use, never
// destroyed: tensors held by statics may be freed after it would be).
CachingAllocator& caching_allocator(int device);

}  // namespace tessel::cuda
