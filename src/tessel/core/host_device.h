// SPDX-License-Identifier: Apache-2.0
// Marks functions that both the host compiler and nvcc compile, so that one definition of a
// per-element formula (Philox, bf16 rounding, an activation) serves the CPU and the CUDA kernels
// and the CPU tests check the very code the GPU runs.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TESSEL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TESSEL_HOST_DEVICE inline
#endif

namespace tessel::hd {

// Bit casts usable on both sides (std::bit_cast is not a device function).
TESSEL_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TESSEL_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace tessel::hd
