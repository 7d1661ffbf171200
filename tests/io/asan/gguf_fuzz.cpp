// SPDX-License-Identifier: Apache-2.0
// The GGUF reader under AddressSanitizer and UBSan: random mutations of a valid file (byte flips,
// type ids, 0x00 / 0xff, truncation, insertion) must each parse or throw Error, and never read
// outside the buffer. Built from the same sources with sanitizers on.
#include <cstdio>
#include <vector>

#include "io/gguf_mutate.h"
#include "io/gguf_sample.h"
#include "tessel/io/gguf.h"

int main() {
  using namespace tessel;
  const std::vector<uint8_t> valid = io::gguf_sample_bytes();
  io::parse_gguf(valid.data(), valid.size(), "valid");  // the starting point itself parses
  io::GgufMutator mutator(2026);
  int accepted = 0, rejected = 0;
  const int iterations = 30000;
  for (int iter = 0; iter < iterations; ++iter) {
    std::vector<uint8_t> exact = mutator.mutate(valid);
    try {
      io::parse_gguf(exact.data(), exact.size(), "fuzz");
      ++accepted;
    } catch (const Error&) {
      ++rejected;
    }
  }
  std::printf("gguf fuzz: %d mutations, %d accepted, %d rejected with Error\n", iterations,
              accepted, rejected);
  return rejected > 0 && accepted > 0 ? 0 : 1;
}
