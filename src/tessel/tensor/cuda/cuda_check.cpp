// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/cuda/cuda_check.h"

#include <mutex>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::cuda {

void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) [[likely]]
    return;
  cudaGetLastError();
  throw Error(std::string(call) + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e),
              std::string(file) + ":" + std::to_string(line));
}

int device_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why != nullptr) *why = cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "the driver reports 0 devices";
  return n;
}

DeviceGuard::DeviceGuard(int device) {
  TESSEL_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) TESSEL_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

cudaStream_t stream(int device) {
  static std::mutex mutex;
  static std::vector<cudaStream_t>* streams = new std::vector<cudaStream_t>();
  std::lock_guard<std::mutex> lock(mutex);
  if (streams->empty()) {
    int n = device_count();
    TESSEL_CHECK(n > 0, "no CUDA device visible");
    streams->assign(size_t(n), nullptr);
  }
  TESSEL_CHECK(device >= 0 && device < int(streams->size()), "cuda:", device, ": only ",
               streams->size(), " CUDA devices visible");
  cudaStream_t& s = (*streams)[size_t(device)];
  if (s == nullptr) {
    DeviceGuard guard(device);
    TESSEL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  return s;
}

}  // namespace tessel::cuda
