// SPDX-License-Identifier: Apache-2.0
#include "kernels/cuda/gpu_check.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/op_harness.h"
#include "tessel/core/error.h"

namespace tessel::cuda_test {

void check_cuda(cudaError_t e, const char* what) {
  TESSEL_CHECK(e == cudaSuccess, what, " failed: ", cudaGetErrorString(e));
}

namespace {
constexpr unsigned char kGuardByte = 0xa5;
}

void DeviceTensor::allocate() {
  bytes_ = size_t(shape_.numel()) * dtype_size(dtype_);
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes_ + 2 * kGuardBytes), "cudaMalloc");
  base_ = static_cast<char*>(p);
  check_cuda(cudaMemset(base_, kGuardByte, kGuardBytes), "cudaMemset");
  check_cuda(cudaMemset(base_ + kGuardBytes + bytes_, kGuardByte, kGuardBytes), "cudaMemset");
}

DeviceTensor::DeviceTensor(const Tensor& host) : shape_(host.shape()), dtype_(host.dtype()) {
  allocate();
  if (bytes_ > 0)
    check_cuda(cudaMemcpy(ptr(), host.data_ptr(), bytes_, cudaMemcpyHostToDevice), "upload");
}

DeviceTensor::DeviceTensor(const Shape& shape, DType dtype) : shape_(shape), dtype_(dtype) {
  allocate();
  check_cuda(cudaMemset(ptr(), 0xff, bytes_), "cudaMemset");
}

DeviceTensor::~DeviceTensor() {
  cudaFree(base_);
}

Tensor DeviceTensor::download() const {
  check_cuda(cudaDeviceSynchronize(), "kernel");
  Tensor t = empty(shape_, dtype_);
  if (bytes_ > 0)
    check_cuda(cudaMemcpy(t.data_ptr(), ptr(), bytes_, cudaMemcpyDeviceToHost), "download");
  return t;
}

bool DeviceTensor::guards_intact() const {
  std::vector<unsigned char> lo(kGuardBytes), hi(kGuardBytes);
  check_cuda(cudaMemcpy(lo.data(), base_, kGuardBytes, cudaMemcpyDeviceToHost), "guards");
  check_cuda(
      cudaMemcpy(hi.data(), base_ + kGuardBytes + bytes_, kGuardBytes, cudaMemcpyDeviceToHost),
      "guards");
  for (size_t i = 0; i < kGuardBytes; ++i)
    if (lo[i] != kGuardByte || hi[i] != kGuardByte) return false;
  return true;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return 1e-4;
    case DType::F16:
      return 1e-6;
    default:
      return 1e-10;
  }
}

Tensor rounded(const Tensor& t, DType dtype) {
  return t.to(DType::F32).to(dtype);
}

void Report::check(const std::string& what, bool ok, const std::string& detail) {
  ++checks_;
  if (ok) return;
  ++failures_;
  std::printf("FAIL %s %s\n", what.c_str(), detail.c_str());
}

void Report::nmse(const std::string& what, const Tensor& got, const Tensor& want, double max) {
  const double e = testing::nmse(got.to(DType::F64), want);
  check(what, e <= max, "nmse " + std::to_string(e) + " > " + std::to_string(max));
}

void Report::nmse(const std::string& what, const DeviceTensor& got, const Tensor& want,
                  double max) {
  nmse(what, got.download(), want, max);
  check(what + " guards", got.guards_intact(), "bytes around the output were overwritten");
}

void Report::bitwise(const std::string& what, const Tensor& got, const Tensor& want) {
  const bool same = got.dtype() == want.dtype() && got.nbytes() == want.nbytes() &&
                    std::memcmp(got.data_ptr(), want.data_ptr(), got.nbytes()) == 0;
  check(what, same, "differs bitwise");
}

}  // namespace tessel::cuda_test
