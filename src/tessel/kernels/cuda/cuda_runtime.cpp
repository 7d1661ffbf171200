// SPDX-License-Identifier: Apache-2.0
#include "tessel/kernels/cuda/cuda_runtime.h"

#include "tessel/core/error.h"

namespace tessel::kernels::cuda {

std::string DeviceInfo::str() const {
  return name + " (sm_" + std::to_string(major) + std::to_string(minor) + ", " +
         std::to_string(multiprocessors) + " SMs, " + std::to_string(total_memory >> 30) + " GiB)";
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  TESSEL_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo info;
  info.name = p.name;
  info.major = p.major;
  info.minor = p.minor;
  info.multiprocessors = p.multiProcessorCount;
  info.total_memory = p.totalGlobalMem;
  return info;
}

void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) [[likely]]
    return;
  throw Error(std::string(call) + " failed: " + cublasLtGetStatusName(s) + ": " +
                  cublasLtGetStatusString(s),
              std::string(file) + ":" + std::to_string(line));
}

}  // namespace tessel::kernels::cuda
