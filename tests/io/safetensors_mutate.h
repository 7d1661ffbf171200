// SPDX-License-Identifier: Apache-2.0
// Random mutations of a safetensors file for fuzzing its parser: byte flips, JSON punctuation,
// truncation and insertion, 1 to 16 edits each, from a seeded LCG so every run is the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessel::io {

class SafetensorsMutator {
 public:
  explicit SafetensorsMutator(uint64_t seed) : state_(seed) {}

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
          f[at] = uint8_t("0123456789[]{},:\"-"[(next() >> 40) % 18]);
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
};

}  // namespace tessel::io
