// SPDX-License-Identifier: Apache-2.0
// The CUDA op kernels (src/tessel/kernels/cuda/ops) on a GPU: every launcher on odd sizes and long
// rows against the fp64 reference computed on the host (NMSE, guard bytes around outputs,
// unwritten outputs caught as NaN), gradients included; dropout, casts and embedding bit for bit
// against the CPU backend. Exits 77 (CTest: skipped) where no GPU is visible.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <exception>

#include "kernels/cuda/gpu_check.h"

int main() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("no CUDA device visible (%s): skipped\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  tessel::cuda_test::Report report;
  try {
    tessel::cuda_test::elementwise_cases(report);
    tessel::cuda_test::row_cases(report);
    tessel::cuda_test::misc_cases(report);
  } catch (const std::exception& ex) {
    std::printf("FAIL: %s\n", ex.what());
    return 1;
  }
  std::printf("%d checks, %d failed\n", report.checks(), report.failures());
  return report.failures() == 0 ? 0 : 1;
}
