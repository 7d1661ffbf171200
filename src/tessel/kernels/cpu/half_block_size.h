// SPDX-License-Identifier: Apache-2.0
// How many bytes of rows the bf16 / f16 kernels widen to f32 at a time (half_kernels.cpp). One
// setting for every kernel set, so it lives outside them.
#pragma once

#include <cstdint>

namespace tessel::kernels::cpu {

// The f32 stand-ins of a large operand are made a block of rows at a time, about this many bytes
// each (default 32 MiB), so that a vocabulary-sized tensor (GPT-2's logits and their gradient:
// 50257 columns) never has a whole f32 copy beside its 16-bit self; that copy would take back the
// memory the 16-bit activations save.
int64_t half_block_bytes();
// Returns the previous value. Tests lower it to exercise the blocking.
int64_t set_half_block_bytes(int64_t bytes);

}  // namespace tessel::kernels::cpu
