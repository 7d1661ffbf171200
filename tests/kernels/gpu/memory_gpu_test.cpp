// SPDX-License-Identifier: Apache-2.0
// Device memory on a real GPU: the caching allocator's checks over cudaMalloc (the same ones the
// CPU tests run over host memory), and CUDA tensors: host <-> device copies of every dtype at odd
// sizes and past the staging buffer, fills, conversions across devices, device-to-device copies,
// and the refusal of host reads.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/caching_allocator_checks.h"
#include "tessel/tensor/cuda/cuda_allocator.h"
#include "tessel/tensor/device_memory.h"

namespace tessel {
namespace {

const Device kGpu = Device::cuda(0);

// Values of every magnitude up to a few hundred, so integer dtypes hold more than 0 and +-1.
Tensor random_host(int64_t n, DType dtype, Generator& gen) {
  Tensor t = randn({n}, DType::F64, &gen);
  double* p = t.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] *= 100.0;
  return t.to(dtype);
}

TEST(GpuCachingAllocator, ReusesFreedBlocks) {
  CachingAllocator a(cuda::make_device_source(0));
  test::check_reuse(a);
}
TEST(GpuCachingAllocator, SplitsAndCoalesces) {
  CachingAllocator a(cuda::make_device_source(0));
  test::check_split_and_coalesce(a);
}
TEST(GpuCachingAllocator, SplitsLargeBlocks) {
  CachingAllocator a(cuda::make_device_source(0));
  test::check_large_split(a);
}
TEST(GpuCachingAllocator, KeepsStreamsApart) {
  CachingAllocator a(cuda::make_device_source(0));
  test::check_streams_apart(a);
}
TEST(GpuCachingAllocator, CountsInUsePeakAndReserved) {
  CachingAllocator a(cuda::make_device_source(0));
  test::check_stats(a);
}
TEST(GpuCachingAllocator, ReportsOutOfMemory) {
  CachingAllocator a(cuda::make_device_source(0));
  test::check_out_of_memory(a, size_t(1) << 50);  // 1 PiB: more than any GPU holds
}
TEST(GpuCachingAllocator, RefusesForeignPointers) {
  CachingAllocator a(cuda::make_device_source(0));
  test::check_foreign_pointer(a);
}

// Host -> device -> host for every dtype, at odd sizes and one past the 32 MiB staging buffer.
TEST(GpuTensor, RoundTripsEveryDtype) {
  Generator gen(7);
  for (DType dtype : kAllDTypes) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(13), int64_t(33), int64_t(9'000'001)}) {
      Tensor host = random_host(n, dtype, gen);
      Tensor there = to_device(host, kGpu);
      EXPECT_EQ(there.device(), kGpu);
      Tensor back = to_device(there, Device::cpu());
      ASSERT_EQ(back.nbytes(), host.nbytes());
      EXPECT_EQ(std::memcmp(back.data_ptr(), host.data_ptr(), host.nbytes()), 0)
          << dtype_name(dtype) << " n " << n;
    }
  }
}

TEST(GpuTensor, FillsAndZeros) {
  for (DType dtype : {DType::F32, DType::BF16, DType::I64}) {
    Tensor z = zeros({7, 13}, dtype, kGpu);
    Tensor f = full({7, 13}, 3.0, dtype, kGpu);
    std::vector<double> zv = to_device(z, Device::cpu()).to_vector<double>();
    std::vector<double> fv = to_device(f, Device::cpu()).to_vector<double>();
    for (double v : zv) ASSERT_EQ(v, 0.0);
    for (double v : fv) ASSERT_EQ(v, 3.0);
  }
}

// copy_from converts dtypes across devices (on the host side) and copies device to device.
TEST(GpuTensor, CopiesAcrossDevicesWithConversion) {
  Generator gen(3);
  Tensor host = randn({33, 7}, DType::F32, &gen);
  Tensor bf = empty({33, 7}, DType::BF16, kGpu);
  bf.copy_from(host);  // f32 host -> bf16 device
  Tensor back = empty({33, 7}, DType::F32);
  back.copy_from(bf);  // bf16 device -> f32 host
  Tensor want = host.to(DType::BF16).to(DType::F32);
  EXPECT_EQ(std::memcmp(back.data_ptr(), want.data_ptr(), want.nbytes()), 0);
  Tensor dup = bf.clone();  // device to device
  EXPECT_EQ(dup.device(), kGpu);
  Tensor dup_host = to_device(dup, Device::cpu()).to(DType::F32);
  EXPECT_EQ(std::memcmp(dup_host.data_ptr(), want.data_ptr(), want.nbytes()), 0);
}

TEST(GpuTensor, RefusesHostReads) {
  Tensor t = zeros({4}, DType::F32, kGpu);
  EXPECT_THROW(t.data_ptr(), Error);
  EXPECT_THROW(t.item(), Error);
  EXPECT_THROW(t.to_vector<float>(), Error);
  EXPECT_NE(device_data(t), nullptr);
}

// Tensors come from the device's caching allocator: a freed tensor's block serves the next one of
// its size without a new segment (the process-wide allocator holds the earlier tests' blocks, so
// the counts are compared, not the addresses).
TEST(GpuTensor, UseTheCachingAllocator) {
  CachingAllocator& a = cuda::caching_allocator(0);
  { Tensor warm = empty({1000}, DType::F32, kGpu); }
  const CachingAllocatorStats before = a.stats();
  {
    Tensor t = empty({1000}, DType::F32, kGpu);
    EXPECT_GE(a.stats().in_use, before.in_use + 4000);
  }
  Tensor u = empty({1000}, DType::F32, kGpu);
  const CachingAllocatorStats after = a.stats();
  EXPECT_EQ(after.source_acquires, before.source_acquires);
  EXPECT_EQ(after.cache_hits, before.cache_hits + 2);
}

}  // namespace
}  // namespace tessel
