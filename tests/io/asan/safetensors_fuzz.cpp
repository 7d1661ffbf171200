// SPDX-License-Identifier: Apache-2.0
// The safetensors header parser under AddressSanitizer and UBSan: random mutations of a valid
// file (byte flips, JSON punctuation, truncation, insertion) must each parse or throw Error, and
// never read outside the buffer. Built from the same sources with sanitizers on.
#include <cstdio>
#include <vector>

#include "tessel/io/safetensors.h"

int main() {
  using namespace tessel;
  io::NamedTensors tensors = {{"a", randn({7, 3})},
                              {"bb", randn({13}).to(DType::BF16)},
                              {"c", arange(0, 5, 1, DType::I64)},
                              {"empty", zeros({0})}};
  std::vector<uint8_t> valid = io::serialize_safetensors(tensors, {{"format", "pt"}});
  uint64_t state = 2024;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  int accepted = 0, rejected = 0;
  const int iterations = 20000;
  for (int iter = 0; iter < iterations; ++iter) {
    std::vector<uint8_t> f = valid;
    int edits = 1 + int(next() >> 60);
    for (int e = 0; e < edits && !f.empty(); ++e) {
      size_t at = size_t(next() >> 33) % f.size();
      switch (next() >> 62) {
        case 0:
          f[at] = uint8_t(next() >> 56);
          break;
        case 1:
          f[at] = "0123456789[]{},:\"-"[(next() >> 40) % 18];
          break;
        case 2:
          f.resize(at);
          break;
        default:
          f.insert(f.begin() + std::ptrdiff_t(at), uint8_t(next() >> 56));
          break;
      }
    }
    // Copy into an exactly-sized heap buffer so any read past the end is caught.
    std::vector<uint8_t> exact(f.begin(), f.end());
    exact.shrink_to_fit();
    try {
      io::parse_safetensors(exact.data(), exact.size(), "fuzz");
      ++accepted;
    } catch (const Error&) {
      ++rejected;
    }
  }
  std::printf("safetensors fuzz: %d mutations, %d accepted, %d rejected with Error\n", iterations,
              accepted, rejected);
  return rejected > 0 ? 0 : 1;
}
