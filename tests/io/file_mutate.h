// SPDX-License-Identifier: Apache-2.0
// Random mutations of a valid file for fuzzing a parser: byte flips, bytes from an alphabet the
// format finds meaningful (JSON punctuation for safetensors, small type ids and 0x00 / 0xff for
// GGUF), truncation and insertion, 1 to 16 edits each, from a seeded LCG so every run is the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessel::io {

class FileMutator {
 public:
  FileMutator(uint64_t seed, std::string alphabet) : state_(seed), alphabet_(std::move(alphabet)) {}

  std::vector<uint8_t> mutate(const std::vector<uint8_t>& valid) {
    std::vector<uint8_t> f = valid;
    int edits = 1 + int(next() >> 60);
    for (int e = 0; e < edits && !f.empty(); ++e) {
      size_t at = size_t(next() >> 33) % f.size();
      switch (next() >> 62) {
        case 0:
          f[at] = uint8_t(next() >> 56);
          break;
        case 1:
          f[at] = uint8_t(alphabet_[(next() >> 40) % alphabet_.size()]);
          break;
        case 2:
          f.resize(at);
          break;
        default:
          f.insert(f.begin() + std::ptrdiff_t(at), uint8_t(next() >> 56));
          break;
      }
    }
    f.shrink_to_fit();  // an exactly-sized buffer, so a read past the end is caught by ASan
    return f;
  }

 private:
  uint64_t next() { return state_ = state_ * 6364136223846793005ull + 1442695040888963407ull; }
  uint64_t state_;
  std::string alphabet_;
};

}  // namespace tessel::io
