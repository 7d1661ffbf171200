// SPDX-License-Identifier: Apache-2.0
// The CUDA runtime basics every CUDA part of tessel shares: the error check that turns a
// cudaError_t into a tessel::Error naming the call and the driver's message, a guard that makes a
// device current for a scope, and tessel's one stream per device. Compiled only with TESSEL_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace tessel::cuda {

// Throws Error "<call> failed (<file>:<line>): <error name>: <error string>" unless e is
// cudaSuccess; clears the runtime's sticky last error so later calls report their own.
void check(cudaError_t e, const char* call, const char* file, int line);

#define TESSEL_CUDA_CHECK(call) ::tessel::cuda::check((call), #call, __FILE__, __LINE__)

// Visible devices; when none, *why (if given) holds the driver's error string.
int device_count(std::string* why = nullptr);

// Makes `device` current for the guard's life and restores the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// tessel's stream on `device` (non-blocking, created on first use, alive until exit). Copies,
// kernels and the caching allocator's pools all use it, so stream order alone orders them.
cudaStream_t stream(int device);

}  // namespace tessel::cuda
