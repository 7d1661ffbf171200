// SPDX-License-Identifier: Apache-2.0
// Random mutations of a safetensors file for fuzzing its parser: FileMutator with JSON
// punctuation as the meaningful bytes.
#pragma once

#include <cstdint>

#include "file_mutate.h"

namespace tessel::io {

class SafetensorsMutator : public FileMutator {
 public:
  explicit SafetensorsMutator(uint64_t seed) : FileMutator(seed, "0123456789[]{},:\"-") {}
};

}  // namespace tessel::io
