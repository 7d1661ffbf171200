// SPDX-License-Identifier: Apache-2.0
// The CUDA runtime as the kernels see it: device properties, the cuBLAS status check, and the
// runtime basics of tensor/cuda/cuda_check.h (error check, device guard, tessel's stream per
// device). Compiled only with TESSEL_CUDA.
#pragma once

#include <cublasLt.h>

#include <string>

#include "tessel/tensor/cuda/cuda_check.h"

namespace tessel::kernels::cuda {

using tessel::cuda::device_count;
using tessel::cuda::DeviceGuard;
using tessel::cuda::stream;

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t total_memory = 0;
  std::string str() const;  // "NVIDIA H200 (sm_90, 132 SMs, 140 GiB)"
};
DeviceInfo device_info(int device);

// Throws Error "<call> failed: <status name>: <status string>" unless s is success.
void check_cublas(cublasStatus_t s, const char* call, const char* file, int line);

#define TESSEL_CUBLAS_CHECK(call) \
  ::tessel::kernels::cuda::check_cublas((call), #call, __FILE__, __LINE__)

}  // namespace tessel::kernels::cuda
