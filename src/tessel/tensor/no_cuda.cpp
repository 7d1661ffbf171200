// SPDX-License-Identifier: Apache-2.0
// Device memory in a build without CUDA: every request for a CUDA device is one clear Error.
#include "tessel/tensor/device_memory.h"

namespace tessel {

namespace {
constexpr const char* kWhy =
    "built without CUDA (configure with the CUDA toolkit, nvcc, cuBLASLt and NCCL installed, or "
    "-DTESSEL_CUDA=ON)";
[[noreturn]] void no_cuda(Device device) {
  TESSEL_FAIL("device ", device.str(), ": tessel was ", kWhy);
}
}  // namespace

bool built_with_cuda() {
  return false;
}

int cuda_device_count(std::string* why) {
  if (why != nullptr) *why = kWhy;
  return 0;
}

void require_cuda_device(Device device) {
  no_cuda(device);
}

Allocator& device_allocator(Device device) {
  no_cuda(device);
}

void copy_across_devices(const Tensor& src, Tensor& dst) {
  no_cuda(src.device().type == DeviceType::CUDA ? src.device() : dst.device());
}

void copy_rows_on_device(Device device, const void*, size_t, void*, size_t, size_t, size_t) {
  no_cuda(device);
}

void fill_on_device(Tensor& t, double) {
  no_cuda(t.device());
}

void synchronize_device(Device device) {
  no_cuda(device);
}

}  // namespace tessel
