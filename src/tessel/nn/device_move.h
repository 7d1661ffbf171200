// SPDX-License-Identifier: Apache-2.0
// Moving a module's state to another device (PyTorch's `module.to(device)`): every parameter,
// buffer and gradient keeps its Tensor identity (optimizers, tied weights and views stay valid);
// only the bytes under it move, one storage at a time, so tensors that share a storage still
// share it after the move.
#pragma once

#include "tessel/nn/module.h"

namespace tessel::nn {

// Moves the storages of `module`'s parameters, buffers and defined gradients to `device` (a CUDA
// device or the host). Storages that own their memory are rebound in place, so every view of
// them follows; a storage over external memory (a memory-mapped file) is copied into a new
// device storage that the module's own tensors then point at. Returns the bytes moved.
int64_t move_to_device(Module& module, Device device);
// The same for loose tensors (an optimizer's state): each keeps its identity, its bytes move.
int64_t move_to_device(const NamedTensors& tensors, Device device);

}  // namespace tessel::nn
