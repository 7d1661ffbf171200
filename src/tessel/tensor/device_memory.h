// SPDX-License-Identifier: Apache-2.0
// Tensors on a CUDA device, as the tensor layer sees them: where their bytes come from, how they
// move to and from the host, and how device code gets their address. None of it needs CUDA
// headers; a build without CUDA implements it with clear errors (tensor/no_cuda.cpp), a build
// with CUDA in tensor/cuda/.
//
// Host code never reads device memory: Tensor::data_ptr() (and so data<T>(), item(), at(),
// to_vector(), str()) refuses a CUDA tensor with an Error; copy it to the host with
// to_device(t, Device::cpu()) first. Kernels on the device take device_data(t).
#pragma once

#include <string>

#include "tessel/tensor/allocator.h"
#include "tessel/tensor/tensor.h"

namespace tessel {

// "cpu", "cuda" (= cuda:0) or "cuda:N"; an Error names anything else. Parsing only: whether the
// device exists is require_cuda_device's question.
Device parse_device(const std::string& text);
// Whether this build has CUDA (TESSEL_CUDA).
bool built_with_cuda();
// CUDA devices visible to this process; 0 without CUDA or without one. When 0 and `why` is given,
// *why says why: "built without CUDA ..." or the driver's error string.
int cuda_device_count(std::string* why = nullptr);
// Throws Error unless `device` is a visible CUDA device: "built without CUDA ...", "no CUDA device
// visible: <driver's error>", or "cuda:N: only M CUDA devices visible".
void require_cuda_device(Device device);

// The caching allocator of a CUDA device (tensor/caching_allocator.h over cudaMalloc).
Allocator& device_allocator(Device device);
// dst = src for tensors of one shape and dtype, at least one of them on a CUDA device. Returns
// when dst holds the values (the copy is synchronised).
void copy_across_devices(const Tensor& src, Tensor& dst);
// `rows` runs of `width` bytes on a CUDA device, from src (runs `src_pitch` bytes apart) to dst
// (`dst_pitch` apart): the strided copies of split and concat. Queued on the device's stream,
// after the kernels queued before it; not waited for.
void copy_rows_on_device(Device device, const void* src, size_t src_pitch, void* dst,
                         size_t dst_pitch, size_t width, size_t rows);
// Every element of a CUDA tensor set to value (in its dtype).
void fill_on_device(Tensor& t, double value);
// Waits for the work tessel queued on a CUDA device.
void synchronize_device(Device device);

// The address of t's first element, for code that runs on t's device (any device).
void* device_data(const Tensor& t);
// A copy of t on `device` (t itself when it is already there).
Tensor to_device(const Tensor& t, Device device);

}  // namespace tessel
