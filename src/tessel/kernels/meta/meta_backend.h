// SPDX-License-Identifier: Apache-2.0
// The meta backend: the kernels of tensors on Device::meta(). A kernel here performs no
// arithmetic and touches no memory; it checks that its tensors are meta and reports a
// KernelEvent (kernels/kernel_observer.h) with the FLOPs and bytes the kernel would cost on a
// real device. This is the shape-only execution that TensorFlow's cost model, Alpa's and Merak's
// profilers and PyTorch's meta device + FlopCounterMode build on.
#pragma once

#include <cstdint>

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

Backend& meta_backend();

// Query-key pairs an attention computes per (batch, head): every pair for a non-causal one, those
// the causal mask and the sliding window leave visible otherwise (padding masks are data and not
// known on meta: the count is then an upper bound).
double attention_pairs(const AttentionDesc& desc);

}  // namespace tessel::kernels
