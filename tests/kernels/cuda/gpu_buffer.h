// SPDX-License-Identifier: Apache-2.0
// Device buffers for the CUDA kernel test programs: a host Tensor's bytes on the GPU between two
// guard zones of a known byte pattern, so that a kernel writing outside its output is caught, and
// the NMSE measure the op harness uses.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::gpu_test {

inline void cuda_ok(cudaError_t e, const char* what) {
  TESSEL_CHECK(e == cudaSuccess, what, ": ", cudaGetErrorString(e));
}

// Exits 77 (CTest's skip code) unless a CUDA device is visible.
inline void require_gpu_or_skip(const char* program) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("%s: no CUDA device (%s): skipped\n", program,
                e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
    std::exit(77);
  }
}

class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 256;
  static constexpr unsigned char kPattern = 0xA7;

  // Uploads t's bytes (or fills the body with the pattern too, as an output's initial state).
  explicit GuardedBuffer(const Tensor& t, bool upload = true)
      : shape_(t.shape()), dtype_(t.dtype()), bytes_(t.nbytes()) {
    cuda_ok(cudaMalloc(&base_, bytes_ + 2 * kGuard), "cudaMalloc");
    cuda_ok(cudaMemset(base_, kPattern, bytes_ + 2 * kGuard), "cudaMemset");
    if (upload && bytes_ > 0)
      cuda_ok(cudaMemcpy(data(), t.data_ptr(), bytes_, cudaMemcpyHostToDevice), "upload");
  }
  ~GuardedBuffer() { cudaFree(base_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  void* data() const { return static_cast<unsigned char*>(base_) + kGuard; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }
  Tensor download() const {
    Tensor h = empty(shape_, dtype_);
    if (bytes_ > 0)
      cuda_ok(cudaMemcpy(h.data_ptr(), data(), bytes_, cudaMemcpyDeviceToHost), "download");
    return h;
  }
  // Whether both guard zones still hold the pattern.
  bool guards_intact() const {
    std::vector<unsigned char> h(bytes_ + 2 * kGuard);
    cuda_ok(cudaMemcpy(h.data(), base_, h.size(), cudaMemcpyDeviceToHost), "guard download");
    for (size_t i = 0; i < kGuard; ++i)
      if (h[i] != kPattern || h[kGuard + bytes_ + i] != kPattern) return false;
    return true;
  }

 private:
  Shape shape_;
  DType dtype_;
  size_t bytes_;
  void* base_ = nullptr;
};

// sum (got - want)^2 / sum want^2 over the finite entries of want; an entry where want is -inf
// must be -inf in got too (else the result is +inf). 0 when want is all zero and got equal.
inline double nmse(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double err = 0, ref = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isinf(w[i]) || std::isinf(g[i])) {
      if (g[i] != w[i]) return INFINITY;
      continue;
    }
    if (std::isnan(g[i])) return INFINITY;
    err += (g[i] - w[i]) * (g[i] - w[i]);
    ref += w[i] * w[i];
  }
  return ref > 0 ? err / ref : err;
}

}  // namespace tessel::gpu_test
