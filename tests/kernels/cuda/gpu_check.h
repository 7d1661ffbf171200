// SPDX-License-Identifier: Apache-2.0
// Helpers of the CUDA op test program (ops_gpu_main.cpp): device copies of host tensors with guard
// bytes on both sides (an out-of-bounds write of a kernel changes them), outputs pre-filled with
// NaN bits (an element a kernel forgets to write fails the comparison), and a report that counts
// NMSE and bitwise checks against the fp64 reference backend run on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "tessel/tensor/tensor.h"

namespace tessel::cuda_test {

void check_cuda(cudaError_t e, const char* what);

class DeviceTensor {
 public:
  explicit DeviceTensor(const Tensor& host);      // uploads host's contents
  DeviceTensor(const Shape& shape, DType dtype);  // an output: every byte 0xff (NaN for floats)
  ~DeviceTensor();
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  void* ptr() const { return base_ + kGuardBytes; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr());
  }
  Tensor download() const;  // waits for the device
  bool guards_intact() const;

  static constexpr size_t kGuardBytes = 256;

 private:
  void allocate();
  char* base_ = nullptr;
  Shape shape_;
  DType dtype_;
  size_t bytes_ = 0;
};

// NMSE ceiling for outputs stored in `dtype`, their inputs equal to the reference's: f32 results
// carry f32 accumulation error, 16-bit ones their final rounding.
double tolerance(DType dtype);

// Host tensor with values rounded to `dtype` (from any floating dtype).
Tensor rounded(const Tensor& t, DType dtype);

class Report {
 public:
  // got: a downloaded output in any floating dtype; want: f64.
  void nmse(const std::string& what, const Tensor& got, const Tensor& want, double max);
  void nmse(const std::string& what, const DeviceTensor& got, const Tensor& want, double max);
  // Bit equality of two host tensors of one dtype.
  void bitwise(const std::string& what, const Tensor& got, const Tensor& want);
  void check(const std::string& what, bool ok, const std::string& detail = "");
  int failures() const { return failures_; }
  int checks() const { return checks_; }

 private:
  int failures_ = 0, checks_ = 0;
};

// Each family's cases (gpu_*_cases.cpp).
void elementwise_cases(Report& r);  // unary, unary backward, binary, casts, dropout
void row_cases(Report& r);          // softmax, layer / rms norm, cross-entropy
void misc_cases(Report& r);         // reduce, square sums, embedding, rope, AdamW

}  // namespace tessel::cuda_test
