// SPDX-License-Identifier: Apache-2.0
// Random mutations of a GGUF file for fuzzing its reader: FileMutator with the bytes that change a
// binary header's meaning (zero, all ones, value-type and ggml-type ids, the top bit).
#pragma once

#include <cstdint>
#include <string>

#include "file_mutate.h"

namespace tessel::io {

class GgufMutator : public FileMutator {
 public:
  explicit GgufMutator(uint64_t seed)
      : FileMutator(
            seed,
            std::string("\x00\x01\x02\x04\x05\x07\x08\x09\x0c\x0d\x1e\x20\x40\x7f\x80\xff", 16)) {}
};

}  // namespace tessel::io
