// SPDX-License-Identifier: Apache-2.0
// What CudaBackend's adapters share: device scratch from the caching allocator, the device error
// flag that the launchers checking indices raise, and naming the first bad index of a tensor
// that may live on the device (read on the host only after a flag was raised).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessel/tensor/tensor.h"

namespace tessel::kernels::cuda {

// `bytes` of device scratch on `device` from its caching allocator. The block is freed when the
// tensor goes and reused only by later work on the same stream, whose order makes that safe.
Tensor device_workspace(int device, size_t bytes);

// An int on the device, zeroed on the device's stream when made. raised() waits for the stream
// (the copy to the host is queued after the launches that may set it) and reads it.
class DeviceFlag {
 public:
  explicit DeviceFlag(int device);
  int* get() const;
  bool raised() const;

 private:
  Tensor flag_;
};

// The first entry of ids (i32 or i64, on any device) outside [0, limit) that is not *ignore
// (ignore may be null): its position, or -1 when every entry is good.
struct BadIndex {
  int64_t position = -1, value = 0;
};
BadIndex first_bad_index(const Tensor& ids, int64_t limit, const int64_t* ignore = nullptr);

}  // namespace tessel::kernels::cuda
