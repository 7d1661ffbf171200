// SPDX-License-Identifier: Apache-2.0
// The NCCL backend for CUDA tensors, behind a CUDA-free header: code that includes it builds with
// or without CUDA. Built when TESSEL_CUDA is ON; otherwise every entry point reports that.
#pragma once

#include "tessel/dist/communicator.h"

namespace tessel::dist {

// Whether this build contains the NCCL backend.
bool nccl_compiled_in();

// Collective over `bootstrap` (a CPU communicator, normally MPI): rank 0 creates the NCCL unique id
// and broadcasts it, every rank selects its GPU (device < 0: the launcher's local rank modulo the
// visible device count) and joins. The result has bootstrap's ranks and label + "/nccl"; it works
// on tensors of Device::cuda(device) and shares the process's recorder and watchdog.
CommPtr make_nccl_communicator(Communicator& bootstrap, int device = -1);

// A tensor over device memory it does not own (the tensor layer has no CUDA allocator yet).
Tensor cuda_tensor_view(void* device_ptr, const Shape& shape, DType dtype, int device);

}  // namespace tessel::dist
