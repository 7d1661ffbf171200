// SPDX-License-Identifier: Apache-2.0
// tensor/device_memory.h for a build with CUDA: the caching allocators over cudaMalloc, and the
// copies between host and device. Host <-> device copies go through one pinned staging buffer per
// device (page-locked memory is what the DMA engines read and write at full speed; pageable
// memory would be staged by the driver anyway), chunk by chunk with cudaMemcpyAsync on tessel's
// stream of the device, which also orders them after the kernels queued before.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "tessel/tensor/cuda/cuda_allocator.h"
#include "tessel/tensor/cuda/cuda_check.h"
#include "tessel/tensor/device_memory.h"

namespace tessel {

namespace cuda {

namespace {

class DeviceSource final : public MemorySource {
 public:
  explicit DeviceSource(int device) : device_(device) {}
  void* acquire(size_t nbytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, nbytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    TESSEL_CUDA_CHECK(e);
    return p;
  }
  void release(void* ptr, size_t) override {
    DeviceGuard guard(device_);
    TESSEL_CUDA_CHECK(cudaFree(ptr));
  }
  Device device() const override { return Device::cuda(device_); }
  std::string describe() const override {
    DeviceGuard guard(device_);
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
      cudaGetLastError();
      return "cudaMalloc on cuda:" + std::to_string(device_);
    }
    return "cudaMalloc on cuda:" + std::to_string(device_) + " with " +
           std::to_string(free_bytes >> 20) + " MiB free of " + std::to_string(total >> 20) +
           " MiB";
  }

 private:
  int device_;
};

constexpr size_t kStagingBytes = size_t(32) << 20;

// A pinned host buffer per device, used by one copy at a time.
struct Staging {
  std::mutex mutex;
  void* buffer = nullptr;
};

Staging& staging(int device) {
  static std::mutex mutex;
  static std::vector<Staging*>* all = new std::vector<Staging*>();
  std::lock_guard<std::mutex> lock(mutex);
  if (all->size() <= size_t(device)) all->resize(size_t(device) + 1, nullptr);
  Staging*& s = (*all)[size_t(device)];
  if (s == nullptr) {
    s = new Staging;
    DeviceGuard guard(device);
    TESSEL_CUDA_CHECK(cudaMallocHost(&s->buffer, kStagingBytes));
  }
  return *s;
}

void upload(const char* host, char* dev, size_t nbytes, int device) {
  Staging& st = staging(device);
  std::lock_guard<std::mutex> lock(st.mutex);
  DeviceGuard guard(device);
  cudaStream_t s = stream(device);
  for (size_t done = 0; done < nbytes; done += kStagingBytes) {
    size_t n = std::min(kStagingBytes, nbytes - done);
    std::memcpy(st.buffer, host + done, n);
    TESSEL_CUDA_CHECK(cudaMemcpyAsync(dev + done, st.buffer, n, cudaMemcpyHostToDevice, s));
    TESSEL_CUDA_CHECK(cudaStreamSynchronize(s));  // before the buffer is refilled
  }
}

void download(const char* dev, char* host, size_t nbytes, int device) {
  Staging& st = staging(device);
  std::lock_guard<std::mutex> lock(st.mutex);
  DeviceGuard guard(device);
  cudaStream_t s = stream(device);
  for (size_t done = 0; done < nbytes; done += kStagingBytes) {
    size_t n = std::min(kStagingBytes, nbytes - done);
    TESSEL_CUDA_CHECK(cudaMemcpyAsync(st.buffer, dev + done, n, cudaMemcpyDeviceToHost, s));
    TESSEL_CUDA_CHECK(cudaStreamSynchronize(s));
    std::memcpy(host + done, st.buffer, n);
  }
}

}  // namespace

std::unique_ptr<MemorySource> make_device_source(int device) {
  return std::make_unique<DeviceSource>(device);
}

CachingAllocator& caching_allocator(int device) {
  static std::mutex mutex;
  static std::vector<CachingAllocator*>* all = new std::vector<CachingAllocator*>();
  require_cuda_device(Device::cuda(device));
  std::lock_guard<std::mutex> lock(mutex);
  if (all->size() <= size_t(device)) all->resize(size_t(device) + 1, nullptr);
  CachingAllocator*& a = (*all)[size_t(device)];
  if (a == nullptr) {
    a = new CachingAllocator(make_device_source(device));
    a->set_stream(reinterpret_cast<StreamId>(stream(device)));
  }
  return *a;
}

}  // namespace cuda

bool built_with_cuda() {
  return true;
}

int cuda_device_count(std::string* why) {
  return cuda::device_count(why);
}

void require_cuda_device(Device device) {
  TESSEL_CHECK(device.type == DeviceType::CUDA, "expected a CUDA device, got ", device.str());
  std::string why;
  int n = cuda::device_count(&why);
  TESSEL_CHECK(n > 0, "no CUDA device visible: ", why);
  TESSEL_CHECK(device.index >= 0 && device.index < n, device.str(), ": only ", n, " CUDA device",
               n == 1 ? "" : "s", " visible (cuda:0 to cuda:", n - 1, ")");
}

Allocator& device_allocator(Device device) {
  require_cuda_device(device);
  return cuda::caching_allocator(device.index);
}

void copy_across_devices(const Tensor& src, Tensor& dst) {
  TESSEL_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(),
               "copy_across_devices: ", src.shape(), " ", dtype_name(src.dtype()), " on ",
               src.device().str(), " to ", dst.shape(), " ", dtype_name(dst.dtype()), " on ",
               dst.device().str());
  const size_t n = src.nbytes();
  if (n == 0) return;
  const Device s = src.device(), d = dst.device();
  TESSEL_CHECK(!s.is_meta() && !d.is_meta(), "copy_across_devices: between ", s.str(), " and ",
               d.str(), " (meta tensors have no data)");
  const char* from = static_cast<const char*>(device_data(src));
  char* to = static_cast<char*>(device_data(dst));
  if (s.is_cpu() && d.is_cpu()) {
    std::memmove(to, from, n);
  } else if (s.is_cpu()) {
    cuda::upload(from, to, n, d.index);
  } else if (d.is_cpu()) {
    cuda::download(from, to, n, s.index);
  } else {
    // Device to device: queued after the work on both streams, and waited for.
    cuda::DeviceGuard guard(d.index);
    cudaStream_t st = cuda::stream(d.index);
    if (s.index != d.index) TESSEL_CUDA_CHECK(cudaStreamSynchronize(cuda::stream(s.index)));
    TESSEL_CUDA_CHECK(cudaMemcpyPeerAsync(to, d.index, from, s.index, n, st));
    TESSEL_CUDA_CHECK(cudaStreamSynchronize(st));
  }
}

void copy_rows_on_device(Device device, const void* src, size_t src_pitch, void* dst,
                         size_t dst_pitch, size_t width, size_t rows) {
  require_cuda_device(device);
  if (width == 0 || rows == 0) return;
  cuda::DeviceGuard guard(device.index);
  TESSEL_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                                      cudaMemcpyDeviceToDevice, cuda::stream(device.index)));
}

void fill_on_device(Tensor& t, double value) {
  require_cuda_device(t.device());
  if (t.nbytes() == 0) return;
  if (value == 0.0) {  // all-zero bits is 0 in every dtype
    cuda::DeviceGuard guard(t.device().index);
    cudaStream_t st = cuda::stream(t.device().index);
    TESSEL_CUDA_CHECK(cudaMemsetAsync(device_data(t), 0, t.nbytes(), st));
    TESSEL_CUDA_CHECK(cudaStreamSynchronize(st));
    return;
  }
  Tensor host = full(t.shape(), value, t.dtype());
  copy_across_devices(host, t);
}

void synchronize_device(Device device) {
  require_cuda_device(device);
  cuda::DeviceGuard guard(device.index);
  TESSEL_CUDA_CHECK(cudaStreamSynchronize(cuda::stream(device.index)));
}

}  // namespace tessel
