// SPDX-License-Identifier: Apache-2.0
// GEMM on a GPU: tessel's CUDA backend (cuBLASLt through CudaBackend::gemm) against cuBLAS called
// directly (cublasGemmEx) on the same operands, stream and device, one after the other. Square
// row-major products C = A B of each size, in bf16 (f32 accumulation), f32 and f32 on TF32
// tensor cores. Prints one JSON line per (dtype, size): TFLOP/s of both, their ratio, and the
// NMSE between the two results (they compute the same product).
// Usage: gemm_cuda_bench [SIZE...]   (default 4096 8192)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/tensor/cuda/cuda_allocator.h"
#include "tessel/tensor/device_memory.h"

using namespace tessel;

namespace {

void cublas_ok(cublasStatus_t s, const char* what) {
  TESSEL_CHECK(s == CUBLAS_STATUS_SUCCESS, what, " failed: ", cublasGetStatusString(s));
}

// Uniform values in [-1, 1) from a fixed LCG: fast enough for 8192^2 operands.
Tensor random_host(int64_t n, DType dtype, uint64_t seed) {
  Tensor t = empty({n}, DType::F32);
  float* p = t.data<float>();
  uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    p[i] = float(int64_t(x >> 40) - (int64_t(1) << 23)) / float(1 << 23);
  }
  return t.to(dtype);
}

// Seconds per call of f, timed with CUDA events on `stream` after warm-up calls.
template <typename F>
double seconds_per_call(F&& f, cudaStream_t stream, int iterations) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t start, stop;
  TESSEL_CUDA_CHECK(cudaEventCreate(&start));
  TESSEL_CUDA_CHECK(cudaEventCreate(&stop));
  TESSEL_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iterations; ++i) f();
  TESSEL_CUDA_CHECK(cudaEventRecord(stop, stream));
  TESSEL_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  TESSEL_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(ms) / 1e3 / iterations;
}

double nmse(const Tensor& got, const Tensor& want) {
  std::vector<double> g = to_device(got, Device::cpu()).to_vector<double>();
  std::vector<double> w = to_device(want, Device::cpu()).to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    num += (g[i] - w[i]) * (g[i] - w[i]);
    den += w[i] * w[i];
  }
  return den > 0 ? num / den : num;
}

struct Variant {
  const char* name;
  DType dtype;
  bool tf32;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<int64_t> sizes;
    for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
    if (sizes.empty()) sizes = {4096, 8192};
    require_cuda_device(Device::cuda(0));
    const Device gpu = Device::cuda(0);
    std::fprintf(stderr, "gemm_cuda_bench on %s\n", kernels::cuda::device_info(0).str().c_str());
    kernels::cuda::CudaBackend plain(0);
    setenv("TESSEL_CUDA_TF32", "1", 1);
    kernels::cuda::CudaBackend tf32(0);
    unsetenv("TESSEL_CUDA_TF32");
    cudaStream_t stream = kernels::cuda::stream(0);
    cublasHandle_t handle;
    cublas_ok(cublasCreate(&handle), "cublasCreate");
    cublas_ok(cublasSetStream(handle, stream), "cublasSetStream");

    const Variant variants[] = {
        {"bf16", DType::BF16, false}, {"f32", DType::F32, false}, {"tf32", DType::F32, true}};
    for (int64_t n : sizes) {
      for (const Variant& v : variants) {
        Tensor a = to_device(random_host(n * n, v.dtype, 1), gpu).reshape({n, n});
        Tensor b = to_device(random_host(n * n, v.dtype, 2), gpu).reshape({n, n});
        Tensor c_tessel = zeros({n, n}, v.dtype, gpu);
        Tensor c_cublas = zeros({n, n}, v.dtype, gpu);
        kernels::Backend& backend = v.tf32 ? static_cast<kernels::Backend&>(tf32) : plain;
        const kernels::GemmDesc desc = kernels::dense_gemm_desc(1, n, n, n, false, false);
        const double flops = 2.0 * double(n) * double(n) * double(n);
        const int iterations = int(std::clamp(4e13 / flops, 5.0, 200.0));

        double t_tessel =
            seconds_per_call([&] { backend.gemm(desc, a, b, c_tessel); }, stream, iterations);
        // cuBLAS is column-major: C^T = B^T A^T, B's storage as its first operand.
        const cudaDataType_t type = v.dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
        const cublasComputeType_t compute =
            v.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        const float one = 1.0f, zero = 0.0f;
        const int ni = int(n);
        double t_cublas = seconds_per_call(
            [&] {
              cublas_ok(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one,
                                     device_data(b), type, ni, device_data(a), type, ni, &zero,
                                     device_data(c_cublas), type, ni, compute, CUBLAS_GEMM_DEFAULT),
                        "cublasGemmEx");
            },
            stream, iterations);
        synchronize_device(gpu);
        const double e = nmse(c_tessel, c_cublas);
        std::printf(
            "{\"bench\": \"gemm_cuda\", \"math\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, "
            "\"iterations\": %d, \"tessel_tflops\": %.2f, \"cublas_tflops\": %.2f, "
            "\"ratio\": %.3f, \"nmse_vs_cublas\": %.3g}\n",
            v.name, (long long)n, (long long)n, (long long)n, iterations, flops / t_tessel / 1e12,
            flops / t_cublas / 1e12, t_cublas / t_tessel, e);
        std::fflush(stdout);
      }
    }
    cublasDestroy(handle);
    std::fprintf(stderr, "caching allocator: %s\n",
                 tessel::cuda::caching_allocator(0).summary().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_cuda_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
