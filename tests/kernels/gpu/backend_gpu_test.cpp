// SPDX-License-Identifier: Apache-2.0
// The CUDA backend on a real GPU: every op-harness case of an op it supports, against the fp64
// reference with guard bytes (tests/kernels/op_harness.h); f32 GEMM on TF32 tensor cores; dtype
// conversion against the host's, bit for bit; and the ops it does not support refusing clearly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/op_harness.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/tensor/device_memory.h"

namespace tessel {
namespace {

const Device kGpu = Device::cuda(0);

TEST(CudaBackend, IsTheBackendOfCudaDevices) {
  EXPECT_EQ(kernels::backend_for(kGpu).name(), "cuda:0");
}

TEST(CudaBackend, PassesTheOpHarnessForWhatItSupports) {
  kernels::Backend& backend = kernels::backend_for(kGpu);
  int ran = 0;
  for (const testing::OpCase& c : testing::all_op_cases()) {
    if (!backend.supports(c.op, c.dtype)) continue;
    EXPECT_EQ(testing::check_op_case(c, backend, kGpu), "") << c.name;
    ++ran;
  }
  std::printf("op harness on cuda:0: %d cases\n", ran);
  EXPECT_GT(ran, 0);
}

// TESSEL_CUDA_TF32=1: f32 products on TF32 tensor cores (10-bit mantissas), within TF32's error.
TEST(CudaBackend, Tf32GemmWithinItsPrecision) {
  setenv("TESSEL_CUDA_TF32", "1", 1);
  kernels::cuda::CudaBackend tf32(0);
  unsetenv("TESSEL_CUDA_TF32");
  ASSERT_TRUE(tf32.tf32());
  int ran = 0;
  for (const testing::OpCase& c : testing::all_op_cases()) {
    if (c.op != kernels::Op::Gemm || c.dtype != DType::F32) continue;
    testing::OpCase loose = c;
    loose.max_nmse = 1e-5;
    EXPECT_EQ(testing::check_op_case(loose, tf32, kGpu), "") << c.name;
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

// Every dtype pair, including values past the integer ranges and halfway cases of bf16.
TEST(CudaBackend, ConvertsLikeTheHost) {
  const std::vector<double> values = {0.0,  -0.0,  1.0,      -1.5,  2.5,    1e6,
                                      -1e6, 127.9, -128.9,   3e9,   -3e9,   1.00390625,
                                      1e-8, 65504, 70000.25, 1e300, -1e300, 0.333333333333};
  Tensor base = from_data<double>(values, Shape({int64_t(values.size())}));
  kernels::Backend& backend = kernels::backend_for(kGpu);
  for (DType from : kAllDTypes) {
    Tensor src_host = base.to(from);
    Tensor src = to_device(src_host, kGpu);
    for (DType to : kAllDTypes) {
      Tensor dst = empty(src.shape(), to, kGpu);
      backend.convert(src, dst);
      Tensor got = to_device(dst, Device::cpu());
      Tensor want = empty(src.shape(), to);
      convert_elements(src_host.data_ptr(), from, want.data_ptr(), to, values.size());
      EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()), 0)
          << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

TEST(CudaBackend, RefusesWhatItDoesNotSupport) {
  kernels::Backend& backend = kernels::backend_for(kGpu);
  EXPECT_FALSE(backend.supports(kernels::Op::GroupedGemm, DType::F32));
  Tensor a = zeros({4, 3}, DType::F32, kGpu), b = zeros({2, 3, 5}, DType::F32, kGpu);
  Tensor offsets = zeros({3}, DType::I64, kGpu), c = zeros({4, 5}, DType::F32, kGpu);
  try {
    backend.grouped_gemm({}, a, b, offsets, c);
    ADD_FAILURE() << "grouped_gemm should throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("grouped_gemm"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
  }
}

// Indices only the device reads: a bad one is an Error naming the op and the value.
TEST(CudaBackend, NamesABadIdFoundOnTheDevice) {
  kernels::Backend& backend = kernels::backend_for(kGpu);
  Tensor weight = zeros({5, 3}, DType::F32, kGpu), out = zeros({4, 3}, DType::F32, kGpu);
  Tensor ids = to_device(from_data<int64_t>({0, 4, 7, 1}, Shape({4})), kGpu);
  try {
    backend.embedding(weight, ids, out);
    ADD_FAILURE() << "embedding should throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("embedding: id 7 at position 2"), std::string::npos) << what;
  }
  Tensor logits = zeros({3, 5}, DType::F32, kGpu), losses = zeros({3}, DType::F32, kGpu);
  Tensor lse = zeros({3}, DType::F32, kGpu);
  Tensor targets = to_device(from_data<int32_t>({-100, 5, 2}, Shape({3})), kGpu);
  try {
    backend.cross_entropy(logits, targets, -100, losses, lse);
    ADD_FAILURE() << "cross_entropy should throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("cross_entropy: target 5 at position 1"), std::string::npos) << what;
  }
}

TEST(CudaBackend, RefusesHostOperands) {
  kernels::Backend& backend = kernels::backend_for(kGpu);
  Tensor a = zeros({2, 3}, DType::F32, kGpu), b = zeros({3, 4}, DType::F32);
  Tensor c = zeros({2, 4}, DType::F32, kGpu);
  EXPECT_THROW(backend.gemm(kernels::dense_gemm_desc(1, 2, 4, 3, false, false), a, b, c), Error);
}

}  // namespace
}  // namespace tessel
